"""`prmkit train --config RECIPE.yaml [key=value ...]`: train a PRM or ORM."""

from __future__ import annotations

import argparse
import contextlib
import json


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "train",
        help="train a process or outcome reward model from a YAML recipe",
        description="Train a reward model. Overrides use dotted keys, e.g. "
        "lr=1e-4 lora.r=8 model.step_format.max_length=1024 data.max_problems=20; values "
        "are checked against the config's types. resume=true continues from the last "
        "checkpoint of output_dir (force=true if config, data or model changed). "
        "Multi-GPU: accelerate launch -m prmkit.cli.train --config ...",
    )
    p.add_argument("--config", required=True, help="YAML recipe (see recipes/)")
    p.add_argument("overrides", nargs="*", metavar="KEY=VALUE", help="config overrides")
    p.add_argument("--print-config", action="store_true",
                   help="print the resolved config and exit")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from prmkit.training.reward_config import RewardTrainingConfig

    config = RewardTrainingConfig.from_yaml(args.config, args.overrides)
    if args.print_config:
        print(json.dumps(config.to_dict(), indent=2))
        return 0
    from prmkit.training.distributed import end_process_group
    from prmkit.training.reward_trainer import train

    try:
        result = train(config)
    except BaseException:
        with contextlib.suppress(Exception):  # the training error is the one to report
            end_process_group(wait=False)
        raise
    end_process_group()
    summary = {"model": str(result.model_dir), "steps": result.steps, **result.metrics}
    skipped = {k: v for k, v in result.data.items() if k.endswith("_skipped_long_prompts") and v}
    if skipped:
        summary["skipped"] = skipped
    print(json.dumps(summary, indent=2))
    return 0


if __name__ == "__main__":  # `accelerate launch -m prmkit.cli.train --config ...`
    import sys

    from prmkit.cli import exit_launched, main

    exit_launched(main(["train", *sys.argv[1:]]))
