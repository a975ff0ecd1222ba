"""One retry loop for HTTP requests to a sampling server.

Retryable: 408, 409, 429, 5xx, connection errors (refused, reset, closed without an
answer) and timeouts. The wait is the server's Retry-After when it sends one (capped),
else exponential backoff from 0.5 s doubling to 8 s, shortened by up to a quarter at
random so that many clients do not retry in step.
"""

from __future__ import annotations

import asyncio
import email.utils
import random
import time
import uuid

import httpx

from prmkit.errors import PrmkitError

INITIAL_DELAY = 0.5
MAX_DELAY = 8.0
MAX_RETRY_AFTER = 120.0


class ServerError(PrmkitError):
    """The server refused a request for a reason retrying will not fix (a 4xx answer)."""

    def __init__(self, url: str, status: int, message: str):
        self.url, self.status, self.message = url, status, message
        super().__init__(f"{url} answered HTTP {status}: {message}")


def is_retryable_status(status: int) -> bool:
    return status in (408, 409, 429) or status >= 500


def retry_after(headers: httpx.Headers | None, cap: float = MAX_RETRY_AFTER) -> float | None:
    """Seconds the server asks to wait (`retry-after-ms`, or `retry-after` as seconds or
    an HTTP date), at most `cap`; None when it asks nothing readable."""
    if not headers:
        return None
    seconds = None
    if "retry-after-ms" in headers:
        try:
            seconds = float(headers["retry-after-ms"]) / 1000
        except ValueError:
            pass
    if seconds is None and "retry-after" in headers:
        value = headers["retry-after"]
        try:
            seconds = float(value)
        except ValueError:
            date = email.utils.parsedate_tz(value)
            if date is not None:
                seconds = email.utils.mktime_tz(date) - time.time()
    if seconds is None or seconds < 0:
        return None
    return min(seconds, cap)


def retry_delay(attempt: int, server_wait: float | None) -> float:
    """Seconds to wait before retry number `attempt + 1` (tests patch this to ~0)."""
    if server_wait is not None:
        return server_wait
    return min(INITIAL_DELAY * 2**attempt, MAX_DELAY) * (1 - 0.25 * random.random())


def server_message(response: httpx.Response) -> str:
    """The error message of an OpenAI-style error body, else the start of the body."""
    try:
        body = response.json()
    except ValueError:
        return response.text[:500] or response.reason_phrase
    if isinstance(body, dict):
        error = body.get("error", body)
        if isinstance(error, dict) and error.get("message"):
            return str(error["message"])
        if isinstance(error, str):
            return error
    return str(body)[:500]


async def post_json(client: httpx.AsyncClient, url: str, body: dict, max_retries: int,
                    max_retry_after: float = MAX_RETRY_AFTER) -> dict:
    """POST `body` and return the JSON answer, retrying what is retryable up to
    `max_retries` times. The same Idempotency-Key goes with every attempt."""
    headers = {"Idempotency-Key": f"prmkit-{uuid.uuid4()}"}
    last_error = ""
    for attempt in range(max_retries + 1):
        wait_asked = None
        try:
            response = await client.post(url, json=body, headers=headers)
        except httpx.TimeoutException as e:
            last_error = f"timed out ({type(e).__name__})"
        except httpx.TransportError as e:
            last_error = f"{type(e).__name__}: {e or 'connection failed'}"
        else:
            if response.status_code < 300:
                try:
                    return response.json()
                except ValueError:
                    raise PrmkitError(f"{url} answered with a body that is not JSON: "
                                      f"{response.text[:200]!r}") from None
            message = server_message(response)
            if not is_retryable_status(response.status_code):
                raise ServerError(url, response.status_code, message)
            last_error = f"HTTP {response.status_code}: {message}"
            wait_asked = retry_after(response.headers, max_retry_after)
        if attempt < max_retries:
            await asyncio.sleep(retry_delay(attempt, wait_asked))
    raise PrmkitError(f"{url} failed after {max_retries + 1} attempts; last error: {last_error}")
