"""The options of every command that takes a PRM: its published format and whether its
remote code may run (see docs/models.md)."""

from __future__ import annotations


def add_prm_arguments(parser, format_flag: bool = True) -> None:
    """--prm-format (also --format where the command has no other --format) and
    --trust-remote-code."""
    flags = ("--prm-format", "--format") if format_flag else ("--prm-format",)
    parser.add_argument(
        *flags, dest="prm_format", default=None, metavar="FAMILY|SPEC",
        help="a model without prmkit_config.json: its published family (qwen2.5-math-prm, "
             "math-shepherd, rlhflow, eurus-prm, eurus-prm-step, skywork-prm, "
             "token-classification) or a spec file (.yaml/.json); default: detected from "
             "config.json where unambiguous")
    parser.add_argument("--trust-remote-code", action="store_true",
                        help="run model code shipped with the weights (Qwen2.5-Math-PRM)")


def prm_load_options(args) -> dict:
    """Keywords for Scorer.from_pretrained / prmkit.models.loading.load_reward_model."""
    return {"format": getattr(args, "prm_format", None),
            "trust_remote_code": bool(getattr(args, "trust_remote_code", False))}
