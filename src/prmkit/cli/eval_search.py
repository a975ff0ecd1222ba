"""`prmkit eval search`: accuracy against generated tokens and against N for several
search result files, with pass@N and majority vote from the best-of-N pools."""

from __future__ import annotations

import sys

from prmkit.cli.outputs import check_file_outputs, check_report_folder

REPORT_FILES = ["search_curves.png", "metrics.json", "report.md", "report.html"]


def cmd_search_eval(args) -> int:
    from prmkit.cli import eval_summary
    from prmkit.cli.eval_output import emit, show_progress
    from prmkit.evaluation.plots import plot_search_curves
    from prmkit.evaluation.report import write_report
    from prmkit.search.accounting import evaluate_results, read_results, report_table

    check_file_outputs(args, args.output)
    out = check_report_folder(args, args.out_dir, REPORT_FILES)
    gold = None
    if args.problems:
        from prmkit.data.math_problems import problem_key, read_problems

        gold = {problem_key(p): p.answer for p in read_problems(args.problems)
                if p.answer is not None}
    files = [read_results(path) for path in args.results]
    result = evaluate_results(files, gold, trials=args.trials, seed=args.seed,
                              progress=show_progress(args))
    plot = plot_search_curves(result, out / "search_curves.png")
    paths = write_report(out, result, plots={"accuracy against compute": plot},
                         title="prmkit search evaluation",
                         tables={"methods and budgets": report_table(result)})
    print(f"wrote {paths['json']}, {paths['markdown']}, {paths['html']} and {plot}",
          file=sys.stderr)
    emit(result, args, eval_summary.search)
    return 0


def add_parser(sub, common) -> None:
    s = sub.add_parser("search", help="search results: accuracy against generated tokens and N")
    s.add_argument("--results", action="append", required=True,
                   help="a `prmkit search` output (one method and budget); repeatable")
    s.add_argument("--problems", help="problems JSONL with gold answers (default: the "
                                      "answer field of the result lines)")
    s.add_argument("--out-dir", required=True,
                   help="writes search_curves.png, metrics.json, report.md, report.html")
    s.add_argument("--trials", type=int, default=400, help="majority-vote draws")
    s.add_argument("--seed", type=int, default=0)
    common(s, threshold=None)
    s.set_defaults(func=cmd_search_eval)
