"""`prmkit export vllm`: a trained reward model in a layout vLLM's pooling runner serves."""

from __future__ import annotations


def cmd_export_vllm(args) -> int:
    from prmkit.scoring.vllm_export import export_for_vllm, export_summary

    print(export_summary(export_for_vllm(args.model, args.output, dtype=args.dtype)))
    return 0


def register(subparsers) -> None:
    p = subparsers.add_parser("export", help="export a trained reward model for serving")
    sub = p.add_subparsers(dest="export_command", metavar="TARGET", required=True)
    v = sub.add_parser(
        "vllm", help="a <Backbone>ForTokenClassification folder for vLLM's pooling runner",
        description="Writes the backbone with the classification head as a linear `score` "
                    "layer; serve it with vllm.LLM(folder, runner='pooling') and read step "
                    "probabilities with prmkit.scoring.vllm_export.vllm_step_probs.")
    v.add_argument("--model", required=True, help="a folder written by save_pretrained")
    v.add_argument("-o", "--output", required=True, help="the export folder")
    v.add_argument("--dtype", choices=("bf16", "fp16", "fp32"), default=None,
                   help="the backbone's weights (default: fp32); the head stays fp32")
    v.set_defaults(func=cmd_export_vllm)
