"""`prmkit active run --config LOOP.yaml [key=value ...]`: the active-learning loop;
`prmkit active status OUTPUT_DIR [--json]`: where a run stands, from its manifest."""

from __future__ import annotations

import argparse
import json
import sys

EXIT_WAITING = 3  # the queue source waits for human labels


def register(subparsers) -> None:
    p = subparsers.add_parser("active", help="active learning: sample, select, label, retrain",
                              description="The active-learning loop (docs/active.md).")
    sub = p.add_subparsers(dest="active_command", metavar="COMMAND", required=True)
    run_p = sub.add_parser(
        "run", help="run or resume the loop of a YAML config",
        description="Run the loop of a YAML config (see recipes/active_*.yaml); rerunning "
        "the same command resumes at the step where it stopped. Overrides use dotted keys, "
        "e.g. generations=3 label.source=monte_carlo select.per_problem=8. Exit code 3: "
        "the queue source waits for human labels.")
    run_p.add_argument("--config", required=True, help="loop YAML")
    run_p.add_argument("overrides", nargs="*", metavar="KEY=VALUE", help="config overrides")
    run_p.add_argument("--print-config", action="store_true",
                       help="print the resolved config and exit")
    run_p.set_defaults(func=run)
    status_p = sub.add_parser(
        "status", help="where a loop run stands: steps done, the next step, changed files",
        description="Read OUTPUT_DIR/manifest.json and print, per generation and step, what is "
        "done (seconds, counts), the next step to run (or finished), files of done steps that "
        "changed since, and, with the queue source, the labels the loop waits for. Runs nothing.")
    status_p.add_argument("output_dir", metavar="OUTPUT_DIR", help="the loop's output_dir")
    status_p.add_argument("--json", action="store_true", help="print the status as JSON")
    status_p.set_defaults(func=status)


def run(args: argparse.Namespace) -> int:
    from prmkit.active.loop import LabelsPending, run_loop
    from prmkit.active.loop_config import LoopConfig
    from prmkit.data.paths import check_output_location

    config = LoopConfig.from_yaml(args.config, args.overrides)
    if args.print_config:
        print(json.dumps(config.to_dict(), indent=2))
        return 0
    # a loop's folder is continued when the command runs again (its manifest records
    # each step); that it can be written is checked before any step
    check_output_location(config.output_dir, folder=True)
    try:
        manifest = run_loop(config)
    except LabelsPending as e:
        print(f"prmkit: {e}", file=sys.stderr)
        return EXIT_WAITING
    last = manifest["generations"][str(config.generations - 1)]["steps"]
    print(json.dumps({"output_dir": config.output_dir, "seconds": manifest["seconds"],
                      "model": last["train"]["counts"]["model_dir"],
                      "examples": last["merge"]["counts"]["examples"]}, indent=2))
    return 0


def status(args: argparse.Namespace) -> int:
    from prmkit.active.loop import loop_status

    st = loop_status(args.output_dir)
    if args.json:
        print(json.dumps(st, indent=2))
        return 0
    print(format_status(st))
    for c in st["changed_files"]:
        print(f"warning: {c['path']}: {c['state']} since step {c['step']} of generation "
              f"{c['generation']} was done", file=sys.stderr)
    return 0


def format_status(st: dict) -> str:
    """A table of `loop_status`: one row per generation and step, then the next step."""
    from prmkit.active.loop import STEPS

    rows = [("gen", "step", "done", "seconds", "counts")]
    for gen in st["generations"]:
        for step in STEPS:
            rec = gen["steps"].get(step)
            rows.append((str(gen["generation"]), step, "yes" if rec else "-",
                         f"{rec['seconds']:.1f}" if rec else "",
                         _summary(step, rec["counts"]) if rec else ""))
    widths = [max(len(r[i]) for r in rows) for i in range(4)]
    lines = ["  ".join([*(c.ljust(w) for c, w in zip(r[:4], widths, strict=True)), r[4]]).rstrip()
             for r in rows]
    lines.append(f"total: {st['seconds']:.1f} s over {sum(len(g['done']) for g in st['generations'])}"
                 f" of {len(st['generations']) * len(STEPS)} steps")
    nxt = st["next"]
    lines.append("finished" if nxt is None
                 else f"next: generation {nxt['generation']}, step {nxt['step']}")
    wait = st["waiting_for_labels"]
    if wait is not None:
        lines.append(_waiting(wait))
    return "\n".join(lines)


def _summary(step: str, c: dict) -> str:
    """The main counts of a done step, in words."""
    try:
        if step == "sample":
            return f"{c['samples']} samples of {c['problems']} problems, {c['correct']} correct"
        if step == "score":
            return f"{c['scored']} scored" if c.get("selector") else "no selector (uniform)"
        if step == "select":
            return (f"{c['selected']} of {c['pool']} selected ({c['method']}), "
                    f"{c['selected_wrong']} wrong")
        if step == "label":
            return f"{c['examples']} examples, {c['labelled_steps']} labelled steps"
        if step == "merge":
            return f"{c['examples']} examples"
        loss = (c.get("metrics") or {}).get("train", {}).get("loss")
        return f"{c['steps']} steps" + (f", loss {loss:.4f}" if loss is not None else "")
    except KeyError as e:
        return f"(counts lack {e})"


def _waiting(w: dict) -> str:
    where = f"label {w['queue']}" + ("" if w["queue_written"] else
                                     " (written when the label step runs)")
    if w["error"] is not None:
        return f"waiting for human labels: the labels file is unreadable: {w['error']}"
    if not w["labels_present"]:
        return f"waiting for human labels: {where} and save it as {w['labels']}"
    if w["waiting"]:
        return (f"waiting for human labels: {w['labels']} has {w['pending']} of "
                f"{w['pending'] + w['labelled']} samples not labelled yet "
                "(or label.allow_pending=true)")
    return (f"labels ready in {w['labels']} ({w['labelled']} labelled): rerun "
            "`prmkit active run` to go on")
