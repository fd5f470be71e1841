"""The timeline's marks are stacked so that none covers another, and every label stays in the picture."""

from __future__ import annotations

from itertools import combinations

from infra.console.marks import Mark, Placed, label_width, place, rows_of

LEFT, RIGHT = 190.0, 940.0


def overlap(a: Placed, b: Placed, rows: tuple[int, int]) -> bool:
    return rows[0] == rows[1] and a.left < b.right and b.left < a.right


def test_marks_at_one_moment_are_stacked_one_row_each_earliest_first() -> None:
    pile = [Mark(0, 400.0, 5, "wrong code"), Mark(0, 400.0, 5, "wrong code"), Mark(0, 400.4, 5, "verified")]

    placed = place(pile, left=LEFT, right=RIGHT)

    assert [p.row for p in placed] == [0, 1, 2]
    assert rows_of(pile, placed, 1) == [3]


def test_marks_far_apart_share_a_row_and_marks_in_other_lanes_do_not_push_each_other() -> None:
    marks = [Mark(0, 200.0, 6, "link requested"), Mark(0, 700.0, 6, "link requested"),
             Mark(1, 200.0, 4, "queued"), Mark(1, 201.0, 6, "failed: 421"), Mark(1, 201.0, 5, "abandoned")]

    placed = place(marks, left=LEFT, right=RIGHT)

    assert [p.row for p in placed] == [0, 0, 0, 1, 2]
    assert rows_of(marks, placed, 2) == [1, 3]


def test_a_label_that_would_run_out_on_the_right_is_written_left_of_its_mark() -> None:
    [near_edge, elsewhere] = place([Mark(0, RIGHT - 6, 6, "sent via smtp"), Mark(1, 300.0, 6, "sent via smtp")],
                                   left=LEFT, right=RIGHT)

    assert not near_edge.label_right and near_edge.right == RIGHT
    assert near_edge.left == RIGHT - 12 - 4 - label_width("sent via smtp")
    assert elsewhere.label_right


def test_no_two_placed_marks_of_a_lane_overlap_and_all_stay_within_bounds() -> None:
    marks = [Mark(lane, LEFT + (i * 37) % 750, 6, "x" * (i % 17)) for i in range(60) for lane in (0, 1)]

    placed = place(marks, left=LEFT, right=RIGHT)

    for (m1, p1), (m2, p2) in combinations(zip(marks, placed, strict=True), 2):
        assert m1.lane != m2.lane or not overlap(p1, p2, (p1.row, p2.row)), (m1, m2)
    assert all(LEFT - 6 <= p.left and p.right <= RIGHT for p in placed)
