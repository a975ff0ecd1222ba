import pytest

from prmkit.demo.world import NodeRef, WorldProblem, build_tree
from prmkit.demo.world.error_kinds import KINDS, error_kind, kind_report, pick_indices

# Ann: 7 + 3 * 4 - 5 = 14; the distractor (Ben's 9 apples) is the trap: 9 + 3 * 4 - 5 = 16.
ANN = WorldProblem(
    id="ann",
    text="Ann has 7 apples. She buys 3 bags of 4. Ben has 9 apples. She gives away 5. "
    "How many apples does Ann have now?",
    answer="14",
    kind="word",
    level=1,
    tree=build_tree([("*", 3, 4), ("+", 7, NodeRef(0)), ("-", NodeRef(1), 5)]),
    trap=build_tree([("*", 3, 4), ("+", 9, NodeRef(0)), ("-", NodeRef(1), 5)]),
    trap_kind="distractor",
)
POOL = {
    "right": ["3 * 4 = 12", "7 + 12 = 19", "19 - 5 = 14", "Answer: 14"],
    "slip": ["3 * 4 = 12", "7 + 12 = 18", "18 - 5 = 13", "Answer: 13"],
    "miscopy": ["3 * 4 = 12", "8 + 12 = 20", "20 - 5 = 15", "Answer: 15"],
    "skip": ["7 + 12 = 19", "19 - 5 = 14", "Answer: 14"],
    "cancel": ["3 * 4 = 13", "7 + 13 = 19", "19 - 5 = 14", "Answer: 14"],
    "trap": ["3 * 4 = 12", "9 + 12 = 21", "21 - 5 = 16", "Answer: 16"],
}


@pytest.mark.parametrize("kind", list(POOL))
def test_error_kind_names_the_mistake_of_each_hand_written_solution(kind):
    assert error_kind(ANN, POOL[kind]) == kind


def test_an_operand_that_is_no_true_value_reads_as_a_miscopy_even_after_a_skip():
    # 13 is neither a quantity nor a true sub-result: the text cannot tell a slip done in
    # the head from a miscopy, and the kinds are read from the text alone
    assert error_kind(ANN, ["7 + 13 = 20", "20 - 5 = 15", "Answer: 15"]) == "miscopy"


def test_trap_step_is_a_trap_even_when_a_later_slip_changes_the_answer():
    assert error_kind(ANN, ["3 * 4 = 12", "9 + 12 = 21", "21 - 5 = 17", "Answer: 17"]) == "trap"


def _scores(first_wrong: dict[str, float]) -> list[list[float]]:
    """Right steps 0.9; the first wrong step of each kind as given; later steps 0.5."""
    out = []
    for kind, steps in POOL.items():
        if kind == "right":
            out.append([0.9] * len(steps))
            continue
        first = {"skip": 0, "cancel": 0}.get(kind, 1)
        out.append([0.9] * first + [first_wrong[kind]] + [0.5] * (len(steps) - first - 1))
    return out


def test_per_kind_auroc_and_pick_shares_on_a_hand_built_pool():
    pool = list(POOL.values())
    scores = _scores({"slip": 0.1, "miscopy": 0.9, "skip": 0.95, "cancel": 0.2, "trap": 0.5})
    # two problems with the same pool: the PRM picks the slip in one, the right one in the other
    report = kind_report([ANN, ANN], [pool, pool], [scores, scores], picks=[1, 0])
    auroc = report["step_auroc"]
    assert auroc["slip"] == 1.0  # every right step above the slip
    assert auroc["miscopy"] == 0.5  # tied with every right step
    assert auroc["skip"] == 0.0  # above every right step
    assert auroc["cancel"] == 1.0 and auroc["trap"] == 1.0
    assert report["wrong_steps"] == {k: 2 for k in KINDS}
    assert report["picks"]["slip"] == 0.5 and report["picks"]["right"] == 0.5
    assert report["pool"]["trap"] == pytest.approx(1 / 6)


# A shop's stock (the out-of-distribution wording): 60 + 3 * 5 - 12 = 63; the shop's age
# (41) is the trap: 41 + 3 * 5 - 12 = 44.
SHOP = WorldProblem(
    id="shop",
    text="Kim's shop opens the day with 60 pens on its shelves. 3 boxes of 5 are delivered. "
    "The shop is 41 years old. Customers buy 12 of them. "
    "How many pens are on the shelves at closing time?",
    answer="63",
    kind="word",
    level=6,
    tree=build_tree([("*", 3, 5), ("+", 60, NodeRef(0)), ("-", NodeRef(1), 12)]),
    trap=build_tree([("*", 3, 5), ("+", 41, NodeRef(0)), ("-", NodeRef(1), 12)]),
    trap_kind="distractor",
)


def test_per_kind_auroc_counts_ties_and_pairs_across_two_problems():
    ann = {"right": [0.9, 0.6, 0.7, 0.8], "slip": [0.9, 0.7, 0.1, 0.1]}
    shop = {
        "right": (["3 * 5 = 15", "60 + 15 = 75", "75 - 12 = 63", "Answer: 63"],
                  [0.5, 0.8, 0.9, 0.9]),
        "trap": (["3 * 5 = 15", "41 + 15 = 56", "56 - 12 = 44", "Answer: 44"],
                 [0.6, 0.3, 0.2, 0.2]),
        "skip": (["60 + 15 = 75", "75 - 12 = 63", "Answer: 63"], [0.6, 0.5, 0.5]),
        "miscopy": (["3 * 5 = 15", "60 + 15 = 75", "75 - 21 = 54", "Answer: 54"],
                    [0.9, 0.8, 0.8, 0.8]),
        "cancel": (["3 * 5 = 14", "60 + 14 = 75", "75 - 12 = 63", "Answer: 63"],
                   [0.9, 0.4, 0.9, 0.9]),
    }
    for kind, (steps, _) in shop.items():
        assert error_kind(SHOP, steps) == kind
    report = kind_report(
        [ANN, SHOP], [[POOL[k] for k in ann], [steps for steps, _ in shop.values()]],
        [list(ann.values()), [scores for _, scores in shop.values()]], picks=[1, 0])
    # 12 right steps (the steps before each first error): 0.5, 0.6 x2, 0.7, 0.8 x3, 0.9 x5;
    # a first wrong step's AUROC is (right steps above it + half those equal to it) / 12
    assert report["step_auroc"] == pytest.approx({
        "slip": 8.5 / 12,  # 0.7: 8 above, 1 equal
        "miscopy": 6.5 / 12,  # 0.8: 5 above, 3 equal
        "skip": 10 / 12,  # 0.6: 9 above, 2 equal
        "trap": 1.0,  # 0.3: below every right step
        "cancel": 2.5 / 12,  # 0.9: none above, 5 equal
    })
    assert report["wrong_steps"] == {k: 1 for k in KINDS}
    assert report["picks"] == pytest.approx({"right": 0.5, "slip": 0.5, "miscopy": 0,
                                             "skip": 0, "trap": 0, "cancel": 0, "other": 0})
    assert report["pool"]["right"] == pytest.approx(2 / 7)


def test_a_kind_absent_from_the_pool_has_no_auroc():
    pool = [POOL["right"], POOL["slip"]]
    report = kind_report([ANN], [pool], [[[0.9] * 4, [0.9, 0.2, 0.5, 0.5]]], picks=[0])
    assert report["step_auroc"]["slip"] == 1.0
    assert report["step_auroc"]["trap"] is None


def test_pick_indices_map_answered_solutions_back_to_the_pool():
    assert pick_indices([[0.2, 0.7, 0.1]], [[0, 2, 5]]) == [2]


def test_kinds_are_averaged_over_the_seeds_where_they_occur():
    from prmkit.demo.world.error_kinds import kinds_table, summarise_kinds

    pool = list(POOL.values())
    a = kind_report([ANN], [pool], [_scores({"slip": 0.1, "miscopy": 0.9, "skip": 0.95,
                                              "cancel": 0.2, "trap": 0.5})], picks=[1])
    b = kind_report([ANN], [pool[:2]], [_scores({"slip": 0.9, "miscopy": 0.9, "skip": 0.95,
                                                  "cancel": 0.2, "trap": 0.5})[:2]], picks=[0])
    out = summarise_kinds([{"error_kinds": {"prm": a, "orm": a}},
                           {"error_kinds": {"prm": b, "orm": b}}])
    assert out["slip"]["prm_step_auroc"] == pytest.approx(0.75)  # 1.0 and 0.5
    assert out["trap"]["prm_step_auroc"] == 1.0  # only the first seed has a trap
    assert out["slip"]["prm_picks"] == 0.5 and out["right"]["prm_picks"] == 0.5
    rows = kinds_table(out)["rows"]
    assert [r[0] for r in rows] == [*KINDS, "right", "other"]


# 3x + 11 = 2x + 20: (20 - 11) / (3 - 2) = 9. The regression behind the per-form report: a
# two-sided equation's miscopied coefficient (`4 - 2 = 2`) scored as high as a right step.
TWO_SIDED = WorldProblem(
    id="two-sided",
    text="Solve 3x + 11 = 2x + 20.",
    answer="9",
    kind="equation",
    level=2,
    tree=build_tree([("-", 3, 2), ("-", 20, 11), ("/", NodeRef(1), NodeRef(0))]),
)
TWO_SIDED_RIGHT = ["3 - 2 = 1", "20 - 11 = 9", "9 / 1 = 9", "Answer: 9"]
TWO_SIDED_MISCOPY = ["4 - 2 = 2", "20 - 11 = 9", "9 / 2 = 4", "Answer: 4"]


def test_problem_forms_are_read_from_the_generators_text():
    from prmkit.demo.world import make_problems
    from prmkit.demo.world.problems import FORMS

    assert (ANN.form, TWO_SIDED.form) == ("word", "two-sided")
    chain = WorldProblem(id="eq", text="Solve 4(x - 3) + 2 = 22.", answer="8", kind="equation",
                         level=2, tree=build_tree([("-", 22, 2), ("/", NodeRef(0), 4),
                                                   ("+", NodeRef(1), 3)]))
    assert chain.form == "equation"
    problems = make_problems(600, seed=0, difficulty="medium")
    forms = {p.form for p in problems}
    assert forms == set(FORMS)
    # every problem whose text has x on both sides reads as two-sided, and only those
    assert all((p.form == "two-sided") == (p.kind == "equation" and p.text.count("x") == 2)
               for p in problems)


def test_a_form_the_scores_miss_shows_per_form_where_the_pooled_auroc_hides_it():
    right, miscopy = TWO_SIDED_RIGHT, TWO_SIDED_MISCOPY
    assert error_kind(TWO_SIDED, miscopy) == "miscopy"
    ann_pool = [POOL["right"], POOL["miscopy"]]
    report = kind_report(
        [ANN, ANN, ANN, TWO_SIDED], [ann_pool, ann_pool, ann_pool, [right, miscopy]],
        [[[0.9] * 4, [0.9, 0.1, 0.5, 0.5]]] * 3      # Ann's miscopy: below every right step
        + [[[0.9, 0.9, 0.8, 0.9], [0.95, 0.5, 0.5, 0.5]]],  # the coefficient: above them all
        picks=[0, 0, 0, 1])
    by_form = report["step_auroc_by_form"]
    assert set(by_form) == {"word", "two-sided"}  # only the forms present
    assert by_form["word"]["miscopy"] == 1.0 and by_form["two-sided"]["miscopy"] == 0.0
    assert by_form["word"]["slip"] is None  # no slip in either pool
    # pooled: 3 word misses below all 16 right steps, the coefficient above all of them
    assert report["step_auroc"]["miscopy"] == pytest.approx(3 / 4)
    assert report["wrong_steps_by_form"]["two-sided"]["miscopy"] == 1


def test_forms_are_averaged_over_seeds_and_the_weakest_cell_is_named():
    from prmkit.demo.world.error_kinds import forms_table, summarise_forms, weakest_form_kind

    right, miscopy = TWO_SIDED_RIGHT, TWO_SIDED_MISCOPY
    seeds = []
    for coefficient in (0.95, 0.1):  # the miscopy missed in one seed, caught in the other
        r = kind_report([ANN, TWO_SIDED], [[POOL["right"], POOL["slip"]], [right, miscopy]],
                        [[[0.9] * 4, [0.9, 0.2, 0.5, 0.5]],
                         [[0.9] * 4, [coefficient, 0.5, 0.5, 0.5]]], picks=[0, 0])
        seeds.append({"error_kinds": {"prm": r, "orm": r}})
    forms = summarise_forms(seeds)
    assert list(forms) == ["word", "two-sided"]  # no equation problem in either seed
    cell = forms["two-sided"]["miscopy"]
    assert cell["prm_step_auroc"] == pytest.approx(0.5) and cell["prm_step_auroc_min"] == 0.0
    assert cell["wrong_steps"] == 2
    assert forms["word"]["slip"]["prm_step_auroc"] == 1.0
    assert weakest_form_kind(forms) == ("two-sided", "miscopy", pytest.approx(0.5))
    assert forms_table(forms)["rows"][1][2] == "0.500 (0.000)"
