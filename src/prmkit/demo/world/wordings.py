"""The sentences word problems are written in: one wording per template."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Wording:
    """The sentences of one word-problem template. Fields: name, pron, item, boxes, box,
    other (another person), n (the start), b and c (an event's numbers), verb (one of the
    event's verbs), d (a distractor's number), noun (the item or "of them")."""

    start: str
    add: str
    add_verbs: tuple[str, ...]
    sub: str
    sub_verbs: tuple[str, ...]
    mul: str
    div: str
    addmul: str
    submul: str
    friend: str  # distractors
    age: str
    cost: str
    question: str


PERSON = Wording(
    start="{name} has {n} {item}.",
    add="{pron} {verb} {b} more.", add_verbs=("buys", "finds", "gets"),
    sub="{pron} {verb} {b}.", sub_verbs=("gives away", "loses", "sells"),
    mul="{pron} then has {b} times as many.",
    div="{pron} splits them into {b} equal piles and keeps one pile.",
    addmul="{pron} buys {b} {boxes} of {c}.",
    submul="{pron} gives {c} to each of {b} friends.",
    friend="{other} has {d} {item}.",
    age="{pron} is {d} years old.",
    cost="Each {box} costs {d} dollars.",
    question="How many {noun} does {name} have now?",
)  # fmt: skip
# A shop's stock over a day: no sentence of it is a sentence of PERSON (ood.py uses it).
SHOP = Wording(
    start="{name}'s shop opens the day with {n} {item} on its shelves.",
    add="A delivery of {b} more {verb}.", add_verbs=("arrives", "comes in", "is unpacked"),
    sub="Customers {verb} {b} of them.", sub_verbs=("buy", "take home", "order"),
    mul="Then the stock grows to {b} times its size.",
    div="The stock is shared equally among {b} branches and this shop keeps one share.",
    addmul="{b} {boxes} of {c} are delivered.",
    submul="{b} customers take {c} each.",
    friend="The shop across the street has {d} {item}.",
    age="The shop is {d} years old.",
    cost="A {box} of them sells for {d} dollars.",
    question="How many {noun} are on the shelves at closing time?",
)  # fmt: skip
