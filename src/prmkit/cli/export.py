"""`prmkit export vllm|token-classification`: a trained reward model as a
<Backbone>ForTokenClassification checkpoint (what vLLM's pooling runner serves)."""

from __future__ import annotations

from prmkit.cli.outputs import add_existing_output_arguments


def cmd_export_vllm(args) -> int:
    from prmkit.data.paths import check_output
    from prmkit.models.config import is_token_classification_export
    from prmkit.scoring.vllm_export import export_for_vllm, export_summary

    # before the model is loaded: an earlier export needs --overwrite (export_for_vllm
    # refuses any other folder that is not empty)
    check_output(args.output, folder=True, overwrite=args.overwrite,
                 holds_output=is_token_classification_export)
    print(export_summary(export_for_vllm(args.model, args.output, dtype=args.dtype)))
    return 0


def register(subparsers) -> None:
    p = subparsers.add_parser("export", help="export a trained reward model for serving")
    sub = p.add_subparsers(dest="export_command", metavar="TARGET", required=True)
    for name, help_text in (
            ("vllm", "a <Backbone>ForTokenClassification folder for vLLM's pooling runner"),
            ("token-classification", "the same folder: a <Backbone>ForTokenClassification "
                                     "checkpoint that transformers, vLLM and prmkit load")):
        v = sub.add_parser(
            name, help=help_text,
            description="Writes the backbone with the classification head as a linear "
                        "`score` layer, its prmkit_config.json and a model card. Load it with "
                        "AutoModelForTokenClassification or prmkit's Scorer.from_pretrained, "
                        "or serve it with vllm.LLM(folder, runner='pooling') and read step "
                        "probabilities with prmkit.scoring.vllm_export.vllm_step_probs.")
        v.add_argument("--model", required=True, help="a folder written by save_pretrained")
        v.add_argument("-o", "--output", required=True, help="the export folder")
        add_existing_output_arguments(v)
        v.add_argument("--dtype", choices=("bf16", "fp16", "fp32"), default=None,
                       help="the backbone's weights (default: fp32); the head stays fp32")
        v.set_defaults(func=cmd_export_vllm)
