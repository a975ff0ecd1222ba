"""`prmkit active run --config LOOP.yaml [key=value ...]`: the active-learning loop."""

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


def run(args: argparse.Namespace) -> int:
    from prmkit.active.loop import LabelsPending, run_loop
    from prmkit.active.loop_config import LoopConfig

    config = LoopConfig.from_yaml(args.config, args.overrides)
    if args.print_config:
        print(json.dumps(config.to_dict(), indent=2))
        return 0
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
