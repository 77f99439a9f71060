"""Unit tests of the prefix-caching block pool (``budgetlab.simulator.blocks``), worked by hand
from ``shared/reference/vllm-v1-prefix-async-priority.md`` section 1 (block size 4 here, so
the numbers stay small)."""

from __future__ import annotations

from budgetlab.simulator.blocks import BlockKeys, PrefixBlockPool

B = 4


def pool_of(num_blocks: int, groups, shared, prompts) -> PrefixBlockPool:
    keys = BlockKeys(groups, shared, prompts, B)
    return PrefixBlockPool(num_blocks, keys, len(prompts), B)


def fill(pool: PrefixBlockPool, request: int, tokens: int, known: int) -> None:
    """Admit ``request`` with its hit and give it ``tokens`` computed tokens (one chunk)."""
    hit = pool.lookup(request, known)
    pool.take_hit(request, hit)
    pool.grow(request, -(-tokens // B) - len(hit.blocks))
    pool.cache_full_blocks(request, min(tokens, known))


def test_keys_follow_the_shared_stream_then_the_requests_own():
    # 0: group g shares 8 of 10 prompt tokens; 1: g, whole 8-token prompt; 2: g, whole 8-token
    # prompt (identical to 1); 3: no group; 4: g, shares 12 = its 8 prompt + 4 output tokens
    keys = BlockKeys(["g", "g", "g", None, "g"], [8, 8, 8, 0, 12], [10, 8, 8, 8, 8], B)
    assert keys.key(0, 0) == keys.key(1, 0) == keys.key(4, 0)
    assert keys.key(0, 1) == keys.key(1, 1) == keys.key(4, 1)  # tokens 4..7, all in the stream
    assert keys.key(0, 2) != keys.key(1, 2)  # 0's own prompt tokens vs 1's generated ones
    assert keys.key(1, 2) == keys.key(2, 2)  # identical whole prompts decode alike
    assert keys.key(4, 2) != keys.key(1, 2)  # 4's answer is the stream, 1's is not
    assert keys.key(3, 0) != keys.key(0, 0) and keys.shares_nothing(3) and not keys.shares_nothing(0)


def test_lookup_takes_the_leading_cached_blocks_and_leaves_one_token_to_compute():
    pool = pool_of(10, ["g", "g", "g"], [8, 8, 12], [8, 8, 12])
    fill(pool, 0, 8, 8)  # blocks 0 and 1 of the stream, entered at allocation
    assert pool.num_cached[0] == 2
    assert len(pool.lookup(1, 8).blocks) == 1  # whole 8 tokens cached: cap (8 - 1) // 4 = 1
    hit = pool.lookup(2, 12)  # cap 2 blocks; the stream has 2
    assert hit.blocks == pool.blocks[0] and hit.num_held == 2  # held by a running request


def test_hits_add_references_and_a_release_frees_only_private_blocks():
    pool = pool_of(6, ["g", "g"], [8, 8], [10, 10])
    fill(pool, 0, 10, 10)  # 3 blocks: 2 shared, 1 partial
    fill(pool, 1, 10, 10)  # hits 2, one new block
    assert pool.num_free == 6 - 4
    shared = pool.blocks[0][:2]
    assert [pool.reference_count(b) for b in shared] == [2, 2]
    assert pool.release(1, finished=True) == 1  # only its partial block
    assert [pool.reference_count(b) for b in shared] == [1, 1]
    assert pool.release(0, finished=True) == 3 and pool.num_free == 6


def test_release_puts_unkeyed_blocks_at_the_head_and_keyed_ones_at_the_tail_deepest_first():
    pool = pool_of(6, ["p"], [8], [10])
    fill(pool, 0, 10, 10)  # blocks 1, 2 (keyed) and 3 (partial)
    assert list(pool.free_queue) == [4, 5, 6]
    pool.release(0, finished=True)
    assert list(pool.free_queue) == [3, 4, 5, 6, 2, 1]  # partial first; chain deepest first, block 0 last


def test_eviction_happens_at_reuse_and_later_lookups_stop_there():
    pool = pool_of(3, ["p", None, "p"], [8, 0, 8], [8, 4, 9])
    fill(pool, 0, 8, 8)
    stream_key = pool.key_of_block(2)
    pool.release(0, finished=True)  # p's block 1 (id 2), then block 0 (id 1) at the tail, behind unused 3
    assert list(pool.free_queue) == [3, 2, 1]
    fill(pool, 1, 8, 8)  # two blocks: the unused 3, then 2, whose key is evicted now
    assert pool.blocks[1] == [3, 2] and pool.key_of_block(2) != stream_key  # now 1's own
    hit = pool.lookup(2, 9)
    assert hit.blocks == [1] and hit.num_held == 0  # block 0 still cached (in the free queue)


def test_a_hit_takes_a_free_block_out_of_the_queue_and_refreshes_its_place():
    pool = pool_of(8, ["p", "q", "p", None], [4, 4, 4, 0], [4, 4, 5, 12])
    fill(pool, 0, 4, 4)  # p's block -> 1 (a partial-free whole block: keyed, 4 tokens)
    fill(pool, 1, 4, 4)  # q's block -> 2
    pool.release(0, finished=True)
    pool.release(1, finished=True)
    assert list(pool.free_queue) == [3, 4, 5, 6, 7, 8, 1, 2]
    fill(pool, 2, 5, 5)  # hits p's block 1 (cap (5-1)//4 = 1), takes it out; one new block 3
    assert pool.blocks[2] == [1, 3] and list(pool.free_queue) == [4, 5, 6, 7, 8, 2]
    pool.release(2, finished=True)
    assert list(pool.free_queue) == [3, 4, 5, 6, 7, 8, 2, 1]  # p's block now behind q's: LRU


def test_duplicate_keys_keep_the_earliest_copy_until_it_is_evicted():
    # 0 and 1: identical whole 8-token prompts. 1 hits block 0 only (cap 7 // 4 = 1) and
    # recomputes block 1 into its own copy: two cached copies of one key (rule 20).
    pool = pool_of(6, ["g", "g", "g", None], [8, 8, 8, 0], [8, 8, 8, 16])
    fill(pool, 0, 8, 8)  # blocks [1, 2]
    fill(pool, 1, 8, 8)  # hit [1], own copy 3
    assert pool.blocks[1] == [1, 3] and pool.key_of_block(2) == pool.key_of_block(3)
    pool.release(0, finished=True)  # 2 to the tail (1 is still held)
    pool.release(1, finished=True)  # 3, then 1
    assert list(pool.free_queue) == [4, 5, 6, 2, 3, 1]
    assert pool.lookup(2, 9).blocks == [1, 2]  # the earliest copy
    pool.grow(3, 4)  # 4, 5, 6, then 2: the earliest copy is evicted
    assert pool.lookup(2, 9).blocks == [1, 3]  # the later copy takes over
