"""A report shown in the UI carries its plots inline: a relative link would resolve against the UI's page."""

import base64
import re

import pytest

from apsft_dagster.assets.common import report_markdown

PNG = base64.b64decode("iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJ"
                       "RU5ErkJggg==")


def test_every_plot_link_becomes_the_plot_and_nothing_else_changes():
    markdown = ("# R\n\ntext ![not a plot](https://x.org/a.svg)\n\n"
                "![accuracy](accuracy.png)\n![Hack rate](hack_rate.png)\n")
    shown = report_markdown(markdown, {"accuracy": PNG, "hack_rate.png": PNG[:-1] + b"\x00"}).value
    uris = re.findall(r"!\[([^\]]*)\]\(data:image/png;base64,([^)]+)\)", shown)
    assert [alt for alt, _ in uris] == ["accuracy", "Hack rate"]
    assert base64.b64decode(uris[0][1]) == PNG and base64.b64decode(uris[1][1]) == PNG[:-1] + b"\x00"
    assert ".png)" not in shown and "![not a plot](https://x.org/a.svg)" in shown
    assert re.sub(r"\(data:image/png;base64,[^)]+\)", "", shown) == re.sub(r"\([a-z_]+\.png\)", "", markdown)


def test_a_link_to_a_plot_that_was_not_made_is_an_error_naming_it():
    with pytest.raises(KeyError, match="thought_lengths.png"):
        report_markdown("![t](thought_lengths.png)", {"accuracy": PNG})


def test_table_previews_round_for_display_and_transpose_wide_tables():
    import polars as pl

    from apsft_dagster.assets.common import table_preview

    frame = pl.DataFrame({"policy": ["base", "arm"], "accuracy": [1 / 6, 0.25], "tokens": [123456.7, 12.0],
                          "ok": [True, False]})
    rows = table_preview(frame).value.splitlines()
    assert rows[0] == "| policy | accuracy | tokens | ok |"
    assert rows[2:] == ["| base | 0.1667 | 123,457 | True |", "| arm | 0.25 | 12 | False |"]
    assert frame["accuracy"][0] == 1 / 6  # the frame itself keeps full precision
    rows = table_preview(frame, transpose_on="policy").value.splitlines()
    assert rows[0] == "| field | base | arm |"
    assert rows[2:] == ["| accuracy | 0.1667 | 0.25 |", "| tokens | 123,457 | 12 |", "| ok | True | False |"]


def test_a_loss_curve_shows_the_trained_segments_on_their_own_scale_and_says_the_prompt_is_left_out():
    from apsft_dagster.core.training.plot import loss_curve_figure

    curve = [{"step": s, "loss": 1.2 - 0.1 * s, "prompt": 7.1 - 0.01 * s, "thought": 1.0 - 0.05 * s,
              "boundary_answer": 2.0 - 0.2 * s} for s in range(1, 6)]
    ax = loss_curve_figure(curve, "p").axes[0]
    labels = [t.get_text() for t in ax.get_legend().get_texts()]
    assert labels[:3] == ["window loss (weighted)", "thought nll / token", "boundary_answer nll / token"]
    assert labels[3] == "prompt nll / token left out (weight 0, not trained): 7.05-7.09"
    low, high = ax.get_ylim()
    assert low <= 0.75 and 1.8 <= high < 2.5  # the trained range (0.75-1.8) fills the axes; 7 nats is off it


def test_the_report_summary_is_its_verdict_and_stage_a_table_cut_from_the_report():
    from apsft_dagster.core.report import report_summary

    report = "\n".join(["# Experiment report (smoke profile)", "", "## Question", "", "q?", "",
                        "## Status and verdict", "", "- Final verdict: **X**", "", "## Harvest funnel", "", "| a |",
                        "", "## Stage A", "", "| policy | core_iid |", "|---|---|", "| base | 0.25 |", "",
                        "### Stage B trigger", "", "| arm |", "", "## Plots", "", "![accuracy](accuracy.png)"])
    assert report_summary(report).splitlines() == [
        "# Experiment report (smoke profile)", "", "## Status and verdict", "", "- Final verdict: **X**", "",
        "## Stage A", "", "| policy | core_iid |", "|---|---|", "| base | 0.25 |", "",
        "![accuracy](accuracy.png)", "", "The whole report: the `report` entry and the `path` file."]


def test_a_sparkline_puts_first_to_last_left_to_right_and_low_to_high_bottom_to_top():
    from urllib.parse import unquote

    from apsft_dagster.assets.common import INLINE_MARKDOWN, svg_markdown
    from apsft_dagster.core.training.plot import sparkline_svg

    def points(svg):
        numbers = [int(n) for n in re.search(r"points='([^']*)'", svg).group(1).split(",")]
        return list(zip(numbers[::2], numbers[1::2]))

    # by hand: x from 2 to 238 (2 px padding in 240), y from 2 (highest) to 38 (lowest) in 40
    assert points(sparkline_svg([3.0, 1.0, 2.0])) == [(2, 2), (120, 38), (238, 20)]
    assert points(sparkline_svg([5.0, 5.0])) == [(2, 20), (238, 20)]  # flat: the middle
    long = [float(i % 7) for i in range(1000)]
    picked = points(sparkline_svg(long, most=60))
    assert len(picked) == 60 and picked[0] == (2, round(2 + (6 - long[0]) / 6 * 36)) and picked[-1][0] == 238
    assert [x for x, _ in picked] == sorted({x for x, _ in picked})  # left to right, once each
    shown = svg_markdown(sparkline_svg(long), "answer_potential-seed42", "a caption").md_str
    assert len(shown) < INLINE_MARKDOWN and unquote(shown).count("<polyline") == 1
    with pytest.raises(ValueError, match="the UI shows at most 999 in place"):
        svg_markdown(sparkline_svg(long, most=200), "x", "a caption")
    with pytest.raises(ValueError, match="no values"):
        sparkline_svg([])
