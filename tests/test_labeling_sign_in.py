"""Sign-in under attack, over HTTP on 127.0.0.1 (uvicorn in a thread of the test process;
clients bind addresses of 127.0.0.0/8 to be different clients): strangers' wrong
passwords lock the strangers, not the account; X-Forwarded-For is read only from
configured proxies; a flood of wrong passwords from many addresses does not starve a
labeller's sign-in of the hashing thread."""

from __future__ import annotations

import threading
import time

import httpx
import pytest
from labeling_support import PASSWORD, ThreadServer, free_port, hidden, phase1_record, write_queue

from prmkit.labeling import create_app, security, service, signin
from prmkit.labeling.hashqueue import Busy, RankedQueue
from prmkit.labeling.throttle import LoginThrottle, ThrottleLimits


def _app(db: str, tmp_path, **kwargs):
    app = create_app(db, **kwargs)
    with app.state.sessionmaker() as s:
        service.create_user(s, "ann", PASSWORD)
        service.create_user(s, "bob", PASSWORD)
        p1 = service.create_project(s, "p1", phase=1)
        s.commit()
        service.set_members(s, p1, ["ann", "bob"])
        service.import_queue(s, p1, write_queue(tmp_path / "p1.jsonl", [phase1_record(3)]))
    return app


def _client(server, address: str = "127.0.0.1") -> httpx.Client:
    """A client whose connections come from `address` (any of 127.0.0.0/8)."""
    return httpx.Client(base_url=server.url, timeout=60, follow_redirects=False,
                        transport=httpx.HTTPTransport(local_address=address))


def _sign_in(c: httpx.Client, name: str, password: str = "wrong password",
             headers: dict | None = None) -> httpx.Response:
    token = hidden(c.get("/login").text, "csrf_token")
    return c.post("/login", data={"username": name, "password": password,
                                  "csrf_token": token}, headers=headers)


# --- strangers lock themselves, not the account ----------------------------------------------


def test_strangers_wrong_passwords_do_not_lock_out_the_right_password(tmp_path):
    """Five wrong passwords from anywhere locked an account for 5 minutes, the right
    password included: one guess a minute kept an admin out. Now the strangers' clients
    are locked; past the account's 20 failures each new stranger gets one guess; the
    right password from the labeller's own client signs in."""
    app = _app(str(tmp_path / "labels.sqlite"), tmp_path)  # limits 5 per pair, 20 per account
    with ThreadServer(app) as server:
        codes = []
        for i in range(6):
            with _client(server, f"127.0.0.{11 + i}") as attacker:
                codes.append([_sign_in(attacker, "ann").status_code for _ in range(6)])
        assert codes[:4] == [[401] * 5 + [429]] * 4  # 20 failures: the account is under attack
        assert codes[4:] == [[401] + [429] * 5] * 2  # past them, one guess per new client
        with _client(server, "127.0.0.11") as attacker:  # the attacker's client stays locked
            r = _sign_in(attacker, "ann", PASSWORD)
            assert r.status_code == 429 and 0 < int(r.headers["retry-after"]) <= 300
        with _client(server, "127.0.0.1") as ann:
            r = _sign_in(ann, "ann", PASSWORD)
            assert r.status_code == 303, r.text
            assert ann.get("/tasks").status_code == 200
        with _client(server, "127.0.0.30") as typo:  # under attack: a client's own failure
            assert _sign_in(typo, "ann").status_code == 401  # slows it down
            assert _sign_in(typo, "ann", PASSWORD).status_code == 429
    app.state.engine.dispose()


def test_known_browser_signs_in_while_strangers_on_its_address_are_locked_out(tmp_path):
    """Behind one address (a NAT, a proxy) a stranger's failures lock the address; a
    browser that signed in to the account before carries a device cookie and still gets
    in. The cookie is the account's only, and its own failures are limited too."""
    app = _app(str(tmp_path / "labels.sqlite"), tmp_path)
    with ThreadServer(app) as server, _client(server) as browser, _client(server) as stranger:
        assert _sign_in(browser, "ann", PASSWORD).status_code == 303
        cookie = browser.cookies.get(signin.DEVICE_COOKIE)
        assert cookie and signin.known_device(app.state.device_key, cookie, "ann")
        codes = [_sign_in(stranger, "ann" if i < 5 else f"user{i}").status_code
                 for i in range(21)]
        assert codes == [401] * 5 + [401] * 15 + [429]  # the address is locked
        assert _sign_in(stranger, "ann", PASSWORD).status_code == 429
        assert _sign_in(browser, "ann", PASSWORD).status_code == 303  # the known browser
        # ann's device cookie is not bob's
        assert _sign_in(browser, "bob", PASSWORD).status_code == 429
        # a stolen device cookie gives 5 guesses per window, as a client does
        with _client(server, "127.0.0.40") as thief:
            thief.cookies.set(signin.DEVICE_COOKIE, cookie, path="/login")
            assert [_sign_in(thief, "ann").status_code for _ in range(6)] == [401] * 5 + [429]
    app.state.engine.dispose()


def test_account_under_attack_refuses_only_clients_that_failed_on_it():
    now = [0.0]
    t = LoginThrottle(ThrottleLimits(per_pair=5, per_client=20, window_s=60, per_account=3),
                      clock=lambda: now[0])
    for i in range(3):
        t.failed("ann", f"10.0.0.{i}")
    assert t.retry_after("ann", "10.0.0.9") == 0  # never failed on ann: let through
    assert t.retry_after("ann", "10.0.0.0") == 60  # failed once: waits for it to age out
    assert t.retry_after("bob", "10.0.0.0") == 0  # other accounts: the pair limit only
    t.succeeded("ann", "10.0.0.0")
    assert t.retry_after("ann", "10.0.0.0") == 0
    now[0] = 61.0
    t.failed("ann", "10.0.0.1")  # the attack's failures aged out: 5 per pair again
    assert t.retry_after("ann", "10.0.0.1") == 0
    assert t.retry_after("ann", "10.0.0.1", device="d") == 0
    for _ in range(5):
        t.failed("ann", "10.0.0.1", device="d")
    assert t.retry_after("ann", "10.0.0.2", device="d") == 60  # the device, wherever it is
    assert t.retry_after("ann", "10.0.0.1") == 0  # its failures are not the address's


# --- proxy headers ---------------------------------------------------------------------------


@pytest.mark.parametrize("trusted", [None, "127.0.0.1"])
def test_forwarded_for_not_trusted_unless_configured(trusted, tmp_path, monkeypatch):
    """uvicorn reads X-Forwarded-For from 127.0.0.1 by default: a client on the same host
    chose its address for the throttle with each request. `serve` trusts proxy headers
    only from --forwarded-allow-ips."""
    import uvicorn

    from prmkit.cli import main

    db = str(tmp_path / "labels.sqlite")
    _app(db, tmp_path).state.engine.dispose()
    served = []
    monkeypatch.setattr(uvicorn, "run", lambda app, **options: served.append((app, options)))
    extra = ["--forwarded-allow-ips", trusted] if trusted else []
    assert main(["label", "serve", "--db", db, "--port", str(free_port()), "--log-level",
                 "warning", *extra]) == 0
    app, options = served[0]
    with ThreadServer(app, **options) as server, _client(server) as local:
        spoofed = [_sign_in(local, "ann", headers={"X-Forwarded-For": f"203.0.113.{i}"})
                   .status_code for i in range(6)]
        if trusted:  # through the proxy: each forwarded address is its own client
            assert spoofed == [401] * 6
            same = [_sign_in(local, "bob", headers={"X-Forwarded-For": "198.51.100.7"})
                    .status_code for _ in range(6)]
            assert same == [401] * 5 + [429]
        else:  # every request is 127.0.0.1's, whatever it claims
            assert spoofed == [401] * 5 + [429]
        with _client(server, "127.0.0.2") as other:  # never a configured proxy
            claimed = [_sign_in(other, "bob", headers={"X-Forwarded-For": f"192.0.2.{i}"})
                       .status_code for i in range(6)]
            assert claimed == [401] * 5 + [429]
    app.state.engine.dispose()


# --- the hashing thread under a flood --------------------------------------------------------


def _submit(queue: RankedQueue, results: dict, name: str, rank: int, client: str, fn):
    def go():
        try:
            results[name] = queue.run(fn, client=client, rank=rank, most=1)
        except Busy as e:
            results[name] = e

    thread = threading.Thread(target=go, daemon=True)
    thread.start()
    return thread


def _wait_for(queue: RankedQueue, n: int) -> None:
    deadline = time.monotonic() + 10
    while queue.waiting() != n and time.monotonic() < deadline:
        time.sleep(0.005)
    assert queue.waiting() == n


def test_hash_queue_serves_known_browsers_then_clients_with_fewer_failures():
    queue = RankedQueue(max_waiting=3)
    started, release, order, results = threading.Event(), threading.Event(), [], {}
    threads = [_submit(queue, results, "running", 0, "a",
                       lambda: (started.set(), release.wait(30)))]
    assert started.wait(10)
    with pytest.raises(Busy, match="from this client"):  # a holds the one job it may
        queue.run(lambda: None, client="a", rank=0, most=1)
    for n, (name, rank) in enumerate([("x3", 3), ("y2", 2), ("z1", 1)]):
        threads.append(_submit(queue, results, name, rank, name[0],
                               lambda name=name: order.append(name)))
        _wait_for(queue, n + 1)
    with pytest.raises(Busy):  # full, and ranked no better than the worst waiting
        queue.run(lambda: None, client="w", rank=3)
    threads.append(_submit(queue, results, "known", 0, "device:d",
                           lambda: order.append("known")))  # takes the worst one's place
    threads[1].join(10)
    assert isinstance(results["x3"], Busy)
    _wait_for(queue, 3)
    release.set()
    for t in threads:
        t.join(10)
    assert order == ["known", "z1", "y2"]
    assert queue.run(lambda: 7, client="a") == 7  # a's job is done: a may hash again


def test_legitimate_sign_in_not_starved_by_flooding_clients(tmp_path, monkeypatch):
    """With 40 flooding addresses a labeller's sign-in waited 91 s: one hashing thread
    served a queue of wrong passwords first come, first served. Now a sign-in from a
    client with no failures goes before every client with failures (a known browser
    before all), and a full queue drops its worst-ranked waiter for it. Hashes here sleep
    HASH_S in place of Argon2's work, so the flood costs no CPU."""
    hash_s, attackers = 0.1, 40
    app = _app(str(tmp_path / "labels.sqlite"), tmp_path)
    hashed = []  # passwords in the order the hashing thread took them
    real_verify = security._verify

    def slow_verify(password, password_hash):
        hashed.append(password)
        time.sleep(hash_s)
        return real_verify(password, password_hash)

    stop = threading.Event()
    deadline = time.monotonic() + 120  # the flood ends by itself whatever happens

    def flood(i: int):
        with _client(server, f"127.0.1.{i + 1}") as c:
            token = hidden(c.get("/login").text, "csrf_token")
            n = 0
            while not stop.is_set() and time.monotonic() < deadline:
                n += 1
                r = c.post("/login", data={"username": f"guess{i}x{n}", "password": "wrong",
                                           "csrf_token": token})
                if r.status_code == 429:
                    stop.wait(0.1)

    with ThreadServer(app) as server, _client(server, "127.0.0.5") as known:
        assert _sign_in(known, "bob", PASSWORD).status_code == 303  # before the flood
        monkeypatch.setattr(security, "_verify", slow_verify)
        threads = [threading.Thread(target=flood, args=(i,), daemon=True)
                   for i in range(attackers)]
        for t in threads:
            t.start()
        try:
            throttle = app.state.login_throttle
            while time.monotonic() < deadline and not all(
                    throttle.client_failures(f"127.0.1.{i + 1}") for i in range(attackers)):
                time.sleep(0.1)
            assert all(throttle.client_failures(f"127.0.1.{i + 1}") for i in range(attackers))
            waits = {}
            with _client(server, "127.0.0.200") as fresh:
                for who, c, name in (("new client", fresh, "ann"), ("known browser", known, "bob")):
                    token = hidden(c.get("/login").text, "csrf_token")
                    queued, mark, t0 = security._queue.waiting(), len(hashed), time.monotonic()
                    r = c.post("/login", data={"username": name, "password": PASSWORD,
                                               "csrf_token": token})
                    waits[who] = time.monotonic() - t0
                    assert r.status_code == 303, (who, r.status_code)
                    ahead = hashed[mark:].index(PASSWORD)
                    # the queue was full of attackers' hashes; at most the one under way (and
                    # one taken as the request arrived) ran before the labeller's
                    assert queued >= security.MAX_WAITING // 2, (who, queued)
                    assert ahead <= 2, (who, ahead, queued)
                    assert waits[who] < 10 * hash_s + 5, waits  # generous: 32 queued: 3.2 s
        finally:
            stop.set()
            for t in threads:
                t.join(30)
    print(f"sign-in waits with {attackers} flooding clients, {hash_s} s per hash: "
          + ", ".join(f"{k} {v:.2f} s" for k, v in waits.items()))
    app.state.engine.dispose()
