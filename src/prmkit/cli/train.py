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
        "are checked against the config's types. Relative paths in the recipe are read "
        "relative to its folder, those of overrides relative to the working directory. "
        "An output_dir that holds a run is refused unless resume=true (continue from its "
        "last checkpoint; force=true if config, data or model changed) or overwrite=true "
        "(start again). "
        "Multi-GPU: accelerate launch -m prmkit.cli.train --config ...",
    )
    p.add_argument("--config", required=True, help="YAML recipe (see recipes/)")
    p.add_argument("overrides", nargs="*", metavar="KEY=VALUE", help="config overrides")
    p.add_argument("--print-config", action="store_true",
                   help="print the resolved config and exit")
    p.set_defaults(func=run)


def check_run_paths(config, paths) -> None:
    """Before anything is read or loaded: every data file exists (errors say what a
    relative path was read relative to), and output_dir can be written and, when it
    holds a run, is continued (resume=true) or replaced (overwrite=true)."""
    from prmkit.data.paths import check_output
    from prmkit.training.recipe_paths import check_data_files
    from prmkit.training.run_folder import holds_run

    check_data_files(config.data, paths)
    check_output(config.output_dir, folder=True, overwrite=config.overwrite,
                 resume=config.resume, resume_flag="resume=true",
                 overwrite_flag="overwrite=true", holds_output=holds_run)


def run(args: argparse.Namespace) -> int:
    from prmkit.training.reward_config import load_recipe

    config, paths = load_recipe(args.config, args.overrides)
    if args.print_config:
        print(json.dumps(config.to_dict(), indent=2))
        return 0
    check_run_paths(config, paths)
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
