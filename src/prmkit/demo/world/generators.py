"""Random word problems and linear equations, each with its misreadings ("traps")."""

from __future__ import annotations

import random
import re
from collections.abc import Sequence
from dataclasses import dataclass

from prmkit.demo.world.trees import MAX_VALUE, InvalidTree, Tree, TreeBuilder
from prmkit.demo.world.wordings import PERSON, Wording

INT_RE = re.compile(r"\d+")

PEOPLE = (  # name and pronoun of a word problem's person
    ("Ann", "She"), ("Ben", "He"), ("Cal", "He"), ("Dee", "She"), ("Eva", "She"),
    ("Gus", "He"), ("Ivy", "She"), ("Jon", "He"), ("Kim", "She"), ("Max", "He"),
    ("Ned", "He"), ("Pam", "She"), ("Sam", "He"), ("Tia", "She"),
)  # fmt: skip
_ITEMS = ("apples", "pens", "cards", "eggs", "coins", "books", "shells", "stamps", "cups", "toys")
_BOXES = (("bags", "bag"), ("boxes", "box"), ("packs", "pack"))

# Per level 1..5: ranges of numbers and the number of operations. Word problems also have a
# level 6 that `make_problems` never uses: the out-of-distribution set's (ood.py).
WORD_START = ((3, 12), (5, 20), (8, 25), (10, 30), (12, 40), (50, 99))
WORD_SMALL = ((2, 6), (2, 9), (2, 10), (3, 12), (3, 15), (3, 15))
WORD_FACTOR = ((2, 4), (2, 5), (2, 6), (2, 7), (2, 9), (2, 9))
WORD_NODES = ((2, 3), (3, 4), (4, 5), (5, 6), (5, 6, 7), (8, 9))


@dataclass(frozen=True)
class WordRanges:
    """A word problem's numbers and length: the start amount, the amounts added or taken,
    the factors (each an inclusive range) and the operation counts to choose from."""

    start: tuple[int, int]
    small: tuple[int, int]
    factor: tuple[int, int]
    nodes: tuple[int, ...]


def word_ranges(level: int) -> WordRanges:
    """A level's ranges (1..5; 6 is the out-of-distribution set's)."""
    i = level - 1
    return WordRanges(WORD_START[i], WORD_SMALL[i], WORD_FACTOR[i], WORD_NODES[i])


_EQ_X = ((1, 9), (2, 9), (2, 10), (2, 12), (2, 15))
_EQ_CONST = ((1, 9), (1, 12), (1, 15), (1, 20), (1, 25))
_EQ_LAYERS = ((2,), (2, 3), (3,), (3, 4), (4, 5))



def _word_tree(start: int, events: Sequence[tuple]) -> Tree:
    bld = TreeBuilder()
    acc: int = start
    for ev in events:
        kind = ev[0]
        if kind in ("add", "sub"):
            acc = bld.op("+" if kind == "add" else "-", acc, ev[1])
        elif kind in ("mul", "div"):
            acc = bld.op("*" if kind == "mul" else "/", acc, ev[1])
        else:  # addmul, submul (b groups of c); addsum/subsum are the "b + c" misreading
            inner = bld.op("+" if kind.endswith("sum") else "*", ev[1], ev[2])
            acc = bld.op("+" if kind.startswith("add") else "-", acc, inner)
    return bld.tree()


def _try_tree(make) -> Tree | None:
    try:
        return make()
    except InvalidTree:
        return None


def swap_digits(v: int) -> int | None:
    s = str(v)
    if len(s) == 2 and s[0] != s[1] and s[1] != "0":
        return int(s[::-1])
    return None


def gen_word(
    rng: random.Random, level: int, wording: Wording = PERSON, ranges: WordRanges | None = None
) -> tuple[str, Tree, list[tuple[str, Tree]]]:
    """A word problem of `level` (its ranges, unless `ranges` says others; the level alone
    sets how often a distractor sentence is added), its tree and its traps."""
    r = ranges or word_ranges(level)
    target = rng.choice(r.nodes)
    while True:
        start = rng.randint(*r.start)
        acc, nodes, events = start, 0, []
        for _ in range(40):
            if nodes >= target:
                break
            kinds = ["add", "sub", "sub", "mul", "div"]
            if target - nodes >= 2:
                kinds += ["addmul", "addmul", "submul"]
            kind = rng.choice(kinds)
            if kind == "add":
                b = rng.randint(*r.small)
                ev, new = ("add", b), acc + b
            elif kind == "sub":
                b = rng.randint(*r.small)
                ev, new = ("sub", b), acc - b
            elif kind == "mul":
                k = rng.randint(*r.factor)
                ev, new = ("mul", k), acc * k
            elif kind == "div":
                ks = [k for k in range(2, r.factor[1] + 1) if acc % k == 0 and acc > k]
                if not ks:
                    continue
                k = rng.choice(ks)
                ev, new = ("div", k), acc // k
            else:
                b, c = rng.randint(*r.factor), rng.randint(*r.small)
                ev = (kind, b, c)
                new = acc + b * c if kind == "addmul" else acc - b * c
            repeated = bool(events) and kind in ("mul", "div") and events[-1][0] == kind
            if not 1 <= new <= MAX_VALUE or repeated:
                continue
            events.append(ev)
            acc = new
            nodes += 2 if kind in ("addmul", "submul") else 1
        if nodes == target:
            break
    tree = _word_tree(start, events)
    name, pron = rng.choice(PEOPLE)
    item = rng.choice(_ITEMS)
    boxes, box = rng.choice(_BOXES)
    fields = {"name": name, "pron": pron, "item": item, "boxes": boxes, "box": box}

    def say(template: str, **numbers) -> str:
        return template.format(**fields, **numbers)

    sentences = [say(wording.start, n=start)]
    for ev in events:
        verbs = {"add": wording.add_verbs, "sub": wording.sub_verbs}.get(ev[0])
        verb = rng.choice(verbs) if verbs else ""
        sentences.append(say(getattr(wording, ev[0]), verb=verb, b=ev[1], c=ev[-1]))

    # Trap candidates: misreadings that many samples of this problem share.
    traps: list[tuple[str, Tree | None]] = []
    for k, ev in enumerate(events):
        if ev[0] == "sub":
            flipped = list(events)
            flipped[k] = ("add", ev[1])
            traps.append(("sign", _try_tree(lambda f=flipped: _word_tree(start, f))))
        if ev[0] in ("addmul", "submul") and ev[1] * ev[2] != ev[1] + ev[2]:
            summed = list(events)
            summed[k] = (ev[0].replace("mul", "sum"), ev[1], ev[2])
            traps.append(("add-for-times", _try_tree(lambda s=summed: _word_tree(start, s))))
    if len(events) >= 2:
        traps.append(("forgot-step", _try_tree(lambda: _word_tree(start, events[:-1]))))
    swapped = swap_digits(start)
    if swapped:
        traps.append(("misread", _try_tree(lambda: _word_tree(swapped, events))))
    if rng.random() < 0.25 + 0.1 * level:
        used = set(INT_RE.findall(" ".join(sentences)))
        d = rng.randint(*r.start)
        while str(d) in used:
            d += 1
        products = [k for k, ev in enumerate(events) if ev[0] in ("addmul", "submul")]
        style = rng.choice(("friend", "cost") if products and events[products[0]][0] == "addmul"
                           else ("friend", "age"))  # fmt: skip
        if style == "friend":
            other = rng.choice([p for p, _ in PEOPLE if p != name])
            extra = say(wording.friend, other=other, d=d)
            trap = _try_tree(lambda: _word_tree(d, events))
        elif style == "age":
            extra = say(wording.age, d=d)
            trap = _try_tree(lambda: _word_tree(d, events))
        else:
            d = next((v for v in rng.sample(range(2, 10), 8) if str(v) not in used), 11)
            k = products[0]
            changed = list(events)
            changed[k] = (events[k][0], events[k][1], d)
            extra = say(wording.cost, d=d)
            trap = _try_tree(lambda: _word_tree(start, changed))
        sentences.insert(rng.randint(1, len(sentences)), extra)
        traps.append(("distractor", trap))
    noun = item if rng.random() < 0.5 else "of them"
    sentences.append(say(wording.question, noun=noun))
    valid = [(k, t) for k, t in traps if t is not None and t.answer != tree.answer]
    return " ".join(sentences), tree, valid


def _chain_tree(start: int, steps: Sequence[tuple[str, int]]) -> Tree:
    bld = TreeBuilder()
    acc: int = start
    for op, k in steps:
        acc = bld.op(op, acc, k)
    return bld.tree()


_INVERSE = {"+": "-", "-": "+", "*": "/", "/": "*"}


def gen_equation(rng: random.Random, level: int) -> tuple[str, Tree, list[tuple[str, Tree]]]:
    i = level - 1
    if level in (2, 3, 4) and rng.random() < 0.3:
        return _gen_two_sided(rng, level)
    n_layers = rng.choice(_EQ_LAYERS[i])
    while True:
        x = rng.randint(*_EQ_X[i])
        value, layers = x, []
        multiplicative = rng.random() < 0.8
        ok = True
        for _ in range(n_layers):
            if multiplicative:
                divs = [k for k in range(2, 10) if value % k == 0 and value > k]
                if layers and divs and rng.random() < 0.3:
                    k = rng.choice(divs)
                    layers.append(("/", k))
                    value //= k
                else:
                    k = rng.randint(2, 9 if level > 2 else 5)
                    layers.append(("*", k))
                    value *= k
            else:
                k = rng.randint(*_EQ_CONST[i])
                if value > k + 1 and rng.random() < 0.45:
                    layers.append(("-", k))
                    value -= k
                else:
                    layers.append(("+", k))
                    value += k
            multiplicative = not multiplicative
            if value > MAX_VALUE:
                ok = False
                break
        if ok:
            break
    expr = "x"
    for op, k in layers:
        if op == "*":
            expr = f"{k}x" if expr == "x" else f"{k}({expr})"
        elif op == "/":
            expr = f"x / {k}" if expr == "x" else f"({expr}) / {k}"
        else:
            expr = f"{expr} {op} {k}"
    text = f"Solve {expr} = {value}."
    solve = [(_INVERSE[op], k) for op, k in reversed(layers)]
    tree = _chain_tree(value, solve)
    traps: list[tuple[str, Tree | None]] = []
    for k, (op, c) in enumerate(solve):
        if op in "+-":  # moved a constant without changing its sign
            bad = list(solve)
            bad[k] = (_INVERSE[op], c)
            traps.append(("sign", _try_tree(lambda b=bad: _chain_tree(value, b))))
        if op == "/":  # took the coefficient away instead of dividing by it
            bad = list(solve)
            bad[k] = ("-", c)
            traps.append(("minus-coefficient", _try_tree(lambda b=bad: _chain_tree(value, b))))
        if k + 1 < len(solve):  # undid the inner operation first
            bad = list(solve)
            bad[k], bad[k + 1] = bad[k + 1], bad[k]
            traps.append(("order", _try_tree(lambda b=bad: _chain_tree(value, b))))
    swapped = swap_digits(value)
    if swapped:
        traps.append(("misread", _try_tree(lambda: _chain_tree(swapped, solve))))
    valid = [(k, t) for k, t in traps if t is not None and t.answer != tree.answer]
    return text, tree, valid


def _two_sided_tree(a: int, b: int, c: int, d: int, sign_x: str, sign_c: str) -> Tree:
    bld = TreeBuilder()
    coef = bld.op(sign_x, a, c)
    const = bld.op(sign_c, d, b)
    bld.op("/", const, coef)
    return bld.tree()


def _gen_two_sided(rng: random.Random, level: int) -> tuple[str, Tree, list[tuple[str, Tree]]]:
    i = level - 1
    while True:
        x = rng.randint(*_EQ_X[i])
        c = rng.randint(2, 6)
        a = c + rng.randint(1, 5)
        b = rng.randint(*_EQ_CONST[i])
        d = (a - c) * x + b
        if d <= MAX_VALUE:
            break
    text = f"Solve {a}x + {b} = {c}x + {d}."
    tree = _two_sided_tree(a, b, c, d, "-", "-")
    traps = [
        ("sign", _try_tree(lambda: _two_sided_tree(a, b, c, d, "+", "-"))),
        ("sign", _try_tree(lambda: _two_sided_tree(a, b, c, d, "-", "+"))),
    ]
    valid = [(k, t) for k, t in traps if t is not None and t.answer != tree.answer]
    return text, tree, valid
