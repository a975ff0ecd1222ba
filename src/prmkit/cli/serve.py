"""`prmkit serve MODEL_DIR`: a process reward model as a reward service (docs/rl.md).

The API key comes from $PRMKIT_API_KEY or --api-key-file (never the command line, where
other users of the machine can read it). Without a key the server only binds a loopback
address, unless --no-api-key says that every host of the network is trusted (OpenRLHF's own
remote client sends no key).
"""

from __future__ import annotations

import argparse
import ipaddress
import logging
import os
import sys
from pathlib import Path

from prmkit.errors import PrmkitError
from prmkit.scoring.aggregate import AGGREGATIONS

API_KEY_ENV = "PRMKIT_API_KEY"


def api_key(args: argparse.Namespace) -> str | None:
    if args.api_key_file:
        path = Path(args.api_key_file)
        try:
            key = path.read_text().strip()
        except OSError as e:
            raise PrmkitError(f"--api-key-file {path}: {e.strerror}") from None
        if not key:
            raise PrmkitError(f"--api-key-file {path} is empty")
        return key
    return os.environ.get(API_KEY_ENV) or None


def _loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def cmd_serve(args: argparse.Namespace) -> int:
    from prmkit.rewards.serving.engine import EngineSettings

    key = api_key(args)
    if key is None and not _loopback(args.host) and not args.no_api_key:
        raise PrmkitError(f"--host {args.host} is not a loopback address: set ${API_KEY_ENV} or "
                          f"--api-key-file so that only your trainers can ask for rewards (or "
                          f"--no-api-key on a private network whose every host you trust)")
    from prmkit.rewards.serving.connections import ConnectionLimits

    settings = EngineSettings(token_budget=args.batch_tokens, max_wait_ms=args.max_wait_ms,
                              max_queue_items=args.max_queue,
                              max_batch_requests=args.max_batch_requests,
                              max_request_tokens=args.max_request_tokens,
                              max_queue_tokens=args.max_queue_tokens)
    limits = ConnectionLimits(max_connections=args.max_connections,
                              header_timeout=args.header_timeout,
                              body_timeout=args.body_timeout,
                              min_body_rate=args.min_body_rate * 1024)
    try:
        from prmkit.rewards.serving import protocol
        rules = protocol.TextRules(args.problem_regex, tuple(args.strip_text),
                                   verifier_weight=args.verifier_weight)
    except ValueError as e:  # a bad regular expression
        raise PrmkitError(f"--problem-regex: {e}") from None

    import uvicorn

    from prmkit.rewards.serving import RewardEngine, ScorerBackend, create_app
    from prmkit.rewards.serving.connections import uvicorn_config

    backend = ScorerBackend.from_pretrained(
        args.model_dir, token_budget=args.batch_tokens, dtype=args.dtype, device=args.device,
        policy_tokenizer=args.policy_tokenizer, aggregation=args.aggregation,
        share_prefixes=not args.no_share_prefixes)
    engine = RewardEngine(backend.score, backend.token_bounds, settings)
    app = create_app(engine, api_key=key, rules=rules,
                     policy_tokenizer=backend.policy_tokenizer)
    if key is None:
        print(f"prmkit: note: no API key (${API_KEY_ENV}): anyone who reaches {args.host}:"
              f"{args.port} can ask for rewards", file=sys.stderr)
    logging.getLogger("prmkit.rewards.serving").setLevel(args.log_level.upper()
                                                         if args.log_level != "trace" else "DEBUG")
    config = uvicorn_config(app, args.host, args.port, limits, log_level=args.log_level,
                            timeout_graceful_shutdown=args.graceful_timeout)
    uvicorn.Server(config).run()
    return 0


class KeyOnCommandLine(argparse.Action):
    """`--api-key KEY`: refused, saying where a key is read from instead."""

    def __call__(self, parser, namespace, values, option_string=None):
        parser.error(f"--api-key: a key is never read from the command line (other users of "
                     f"the machine see it in the process list): set ${API_KEY_ENV} or pass "
                     "--api-key-file FILE")


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "serve", help="serve a reward model's step rewards over HTTP (OpenRLHF remote protocol)",
        description="POST /get_reward (OpenRLHF's remote reward protocol), POST "
                    "/v1/step_rewards (per-step rewards with spans), GET /health, GET /metrics "
                    "(Prometheus). Requests from all clients are batched under a token budget.")
    p.add_argument("model_dir", help="a reward model folder written by save_pretrained")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8000)
    p.add_argument("--api-key-file", help=f"a file holding the API key (default: ${API_KEY_ENV})")
    p.add_argument("--api-key", action=KeyOnCommandLine, help=argparse.SUPPRESS)
    p.add_argument("--no-api-key", action="store_true",
                   help="serve a non-loopback --host without a key (a trusted private network)")
    p.add_argument("--batch-tokens", type=int, default=16384,
                   help="tokens (prompt + completion) per batch and per forward pass")
    p.add_argument("--max-wait-ms", type=float, default=5.0,
                   help="how long a batch waits for more requests once it has one")
    p.add_argument("--max-queue", type=int, default=4096,
                   help="completions waiting at most; beyond that: 503 with Retry-After")
    p.add_argument("--max-batch-requests", type=int, default=None,
                   help="requests per batch at most (1: one forward per request)")
    p.add_argument("--max-request-tokens", type=int, default=16 << 20,
                   help="tokens in one request at most, counted before tokenising by their "
                        "upper bound, the texts' UTF-8 bytes; beyond: 413 (default 16 Mi)")
    p.add_argument("--max-queue-tokens", type=int, default=64 << 20,
                   help="tokens waiting at most (same count); beyond: 503 with Retry-After "
                        "(default 64 Mi)")
    p.add_argument("--max-connections", type=int, default=1024,
                   help="open connections at most (lowered to fit the open-file limit); a "
                        "new one replaces the oldest idle or slow one, else gets 503")
    p.add_argument("--header-timeout", type=float, default=10.0,
                   help="seconds a client has to send a request's line and headers (408)")
    p.add_argument("--body-timeout", type=float, default=30.0,
                   help="seconds a client has to send a body, plus 1 s per --min-body-rate "
                        "KiB received (408); also how long it may stop reading its answer")
    p.add_argument("--min-body-rate", type=float, default=256.0, metavar="KIB_PER_S",
                   help="the upload rate in KiB/s a body must keep up (default 256)")
    p.add_argument("--no-share-prefixes", action="store_true",
                   help="run every completion with its prompt (default: completions of one "
                        "prompt in a batch run on its keys/values, the prompt run once)")
    p.add_argument("--dtype", choices=("auto", "bf16", "fp16", "fp32"), default="auto",
                   help="auto: bf16 where the device computes it natively, else fp32")
    p.add_argument("--device", default="auto",
                   help="auto (default: the GPU when there is one), cpu, cuda, cuda:1")
    p.add_argument("--aggregation", choices=AGGREGATIONS, default=None,
                   help="completion score from step rewards (default: the model's setting)")
    p.add_argument("--policy-tokenizer", default=None,
                   help="the policy's tokenizer folder: step ends as policy token indices")
    p.add_argument("--problem-regex", default=None,
                   help="a regular expression whose group (?P<problem>...) picks the problem "
                        "out of a templated prompt (default: the whole prompt)")
    p.add_argument("--strip-text", action="append", default=[], metavar="TEXT",
                   help="cut TEXT from the end of OpenRLHF responses, besides the common "
                        "end-of-turn and padding tokens (repeatable)")
    p.add_argument("--verifier-weight", type=float, default=0.0,
                   help="/get_reward: reward = PRM score + weight x prmkit's grader against "
                        "the request's labels (gold answers); default 0")
    p.add_argument("--graceful-timeout", type=float, default=60.0,
                   help="seconds to finish in-flight requests on SIGTERM / Ctrl-C")
    p.add_argument("--log-level", default="info",
                   choices=("critical", "error", "warning", "info", "debug", "trace"))
    p.set_defaults(func=cmd_serve)
