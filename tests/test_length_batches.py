"""The length batching shared by Scorer and IncrementalScorer, on hand-built rows."""

from prmkit.scoring.length_batches import length_batches

# rows 0..4: new tokens and cached-prefix tokens each reads
LENGTHS = [10, 40, 38, 20, 39]
PAST = [0, 5, 30, 0, 5]


def test_cached_prefix_tokens_count_in_the_token_budget():
    """Longest first (1, 4, 2, 3, 0): row 2 would pad three rows to 40 + 30 > 150 tokens,
    so it starts a batch; row 0 is padded by more than half of row 2's 38 tokens."""
    assert length_batches(LENGTHS, PAST, token_budget=150, max_padding=0.5) == [
        [1, 4], [2, 3], [0]]
    # without the cached tokens, three rows of 40 fit
    assert length_batches(LENGTHS, token_budget=150, max_padding=0.5) == [[1, 4, 2], [3, 0]]


def test_a_past_budget_bounds_new_and_cached_tokens_apart():
    """rows x longest <= token_budget and rows x widest past <= past_budget."""
    assert length_batches(LENGTHS, PAST, token_budget=120, max_padding=0.5,
                          past_budget=100) == [[1, 4, 2], [3, 0]]
    assert length_batches(LENGTHS, PAST, token_budget=120, max_padding=0.5,
                          past_budget=60) == [[1, 4], [2, 3], [0]]
    assert length_batches(LENGTHS, PAST, token_budget=120, max_padding=0.5, past_budget=100,
                          max_batch_size=2) == [[1, 4], [2, 3], [0]]


def test_ties_keep_their_order_and_a_row_over_the_budget_runs_alone():
    assert length_batches([5, 7, 5, 5], token_budget=100, max_padding=0.5) == [[1, 0, 2, 3]]
    assert length_batches([10, 200], [0, 0], token_budget=100, max_padding=1.0) == [[1], [0]]
    assert length_batches([], token_budget=100, max_padding=0.5) == []
