"""A chunked accumulation (FLCE's ``addmm(acc, g_k.t(), x_k, out=acc)``) updates its
accumulator once per two chunks: one ``addmm`` over both chunks' rows, the same sums in
another order (fp32 stays fp32), and every chunk's logits matmul still in chunk order."""

import re
import warnings

import pytest
import torch
import torch.fx as fx
from torch.fx.experimental.proxy_tensor import make_fx

from helpers import compile_and_run, most_alive
from workloads import CHUNKS, accumulate_in_chunks, flce_inputs, flce_like

from inductor_addmm_fix import settings
from inductor_addmm_fix.inductor.passes import accumulate_pairs, adjacent_slices, chunk_order, fx_support, pair_memory

aten = torch.ops.aten
V, H, BT, CHUNK = 48, 40, 96, 16  # 6 chunks: 3 pairs


def graph_of(fn, *args) -> fx.Graph:
    """``fn``'s aten graph (functional ``addmm``, as after AOTAutograd), its values fake
    tensors of one mode as in Inductor's post-grad graphs."""
    return make_fx(fn, tracing_mode="fake")(*args).graph


def accumulations(graph: fx.Graph) -> list[fx.Node]:
    return [n for n in graph.nodes if n.op == "call_function" and n.target in (aten.addmm.default, aten.addmm.dtype)]


def functional_chain(acc, g, x):
    """The functional form of ``accumulate_in_chunks``: each step's ``self`` the previous step."""
    for start in range(0, g.shape[0], CHUNK):
        acc = torch.addmm(acc, g[start : start + CHUNK].t(), x[start : start + CHUNK])
    return acc


@pytest.mark.parametrize("chunks", [2, 5, 6])
def test_consecutive_steps_are_merged_in_pairs(chunks):
    acc, g, x = torch.randn(V, H), torch.randn(chunks * CHUNK, V), torch.randn(chunks * CHUNK, H)
    graph = graph_of(functional_chain, acc, g, x)
    assert accumulate_pairs.accumulate_in_pairs(graph) == chunks // 2
    steps = accumulations(graph)
    assert len(steps) == chunks - chunks // 2  # an odd last chunk stays a step of its own
    assert [s.meta[fx_support.CHUNKS_PER_STEP] for s in steps[: chunks // 2]] == [2] * (chunks // 2)
    # Adjacent row slices of one tensor are taken as one slice: no copy of g or x.
    assert not [n for n in graph.nodes if n.target is aten.cat.default]
    graph.lint()


def test_the_merged_chain_computes_the_same_sums():
    acc, g, x = torch.randn(V, H, dtype=torch.float64), torch.randn(BT, V, dtype=torch.float64), torch.randn(BT, H, dtype=torch.float64)
    module = make_fx(functional_chain, tracing_mode="fake")(acc, g, x)
    assert accumulate_pairs.accumulate_in_pairs(module.graph) == BT // CHUNK // 2
    module.recompile()
    torch.testing.assert_close(module(acc, g, x), functional_chain(acc, g, x), rtol=1e-12, atol=1e-12)


def test_pieces_that_are_not_adjacent_slices_are_concatenated():
    def chain(acc, g1, g2, x):
        acc = torch.addmm(acc, g1.t(), x[:CHUNK])
        return torch.addmm(acc, g2.t(), x[CHUNK : 2 * CHUNK])

    graph = graph_of(chain, torch.randn(V, H), torch.randn(CHUNK, V), torch.randn(CHUNK, V), torch.randn(2 * CHUNK, H))
    assert accumulate_pairs.accumulate_in_pairs(graph) == 1
    (cat,) = [n for n in graph.nodes if n.target is aten.cat.default]  # the two g's; x stays a slice
    assert [a.name for a in cat.args[0]] == ["g1_1", "g2_1"]


def test_steps_with_beta_or_alpha_are_left_alone():
    def chain(acc, g, x):
        acc = torch.addmm(acc, g[:CHUNK].t(), x[:CHUNK], beta=0.5)
        return torch.addmm(acc, g[CHUNK:].t(), x[CHUNK:], alpha=2.0)

    graph = graph_of(chain, torch.randn(V, H), torch.randn(2 * CHUNK, V), torch.randn(2 * CHUNK, H))
    assert accumulate_pairs.accumulate_in_pairs(graph) == 0
    assert len(accumulations(graph)) == 2


@pytest.mark.parametrize("out_dtype", [None, torch.float32], ids=["same dtype", "out_dtype fp32"])
def test_compiled_accumulation_in_pairs_matches_float64(out_dtype):
    dtype = torch.float32 if out_dtype is None else torch.bfloat16
    g, x = torch.randn(BT, V, dtype=dtype), torch.randn(BT, H, dtype=dtype)
    start = torch.randn(V, H)
    kwargs = {} if out_dtype is None else {"out_dtype": out_dtype}
    compiled = compile_and_run(lambda b, g, x: accumulate_in_chunks(b, g, x, CHUNK, **kwargs), start.clone(), g, x)
    assert compiled.events(accumulate_pairs.NAME) == {"chains": 1, "pairs": BT // CHUNK // 2}
    reference = start.double() + g.double().t() @ x.double()
    assert compiled.result.dtype == torch.float32
    err = ((compiled.result.double() - reference).norm() / reference.norm()).item()
    assert err < 1e-6


def test_flce_loop_in_pairs_keeps_every_chunks_logits_matmul_in_order():
    x, w, onehot = flce_inputs(torch.bfloat16)
    compiled = compile_and_run(lambda x, w, y: flce_like(x, w, y, out_dtype=torch.float32), x, w, onehot)
    # The accumulator an in-place step writes keeps its storage: no later temporary of
    # its size reuses it (torch 2.8 gave it to the next pair's operand).
    code = compiled.code
    accumulators = set(re.findall(r"addmm_\.default\((buf\d+),", code))
    reused = set(re.findall(r"reinterpret_tensor\((buf\d+), [^)]*\)[^;]*; del \1\s*# reuse", code))
    reused |= set(re.findall(r"= (buf\d+); del \1\s*# reuse", code))
    assert not accumulators & reused, (accumulators, reused)
    assert compiled.events(accumulate_pairs.NAME)["pairs"] == CHUNKS // 2
    if chunk_order.supported():
        assert compiled.events(chunk_order.NAME)["chunks"] == CHUNKS  # a root per chunk, not per step
    for got, want in zip(compiled.result, flce_like(x.double(), w.double(), onehot.double(), out_dtype=None)):
        torch.testing.assert_close(got.double(), want, rtol=2e-2, atol=2e-2)  # bf16 operands


def two_heads_in_chunks(acc, x, w, tx, tw):
    """JSD's loop: per chunk two logits matmuls of one size (the student's and the
    teacher's), their softmax difference as the chunk's gradient, one accumulation step."""
    for start in range(0, x.shape[0], CHUNK):
        x_k = x[start : start + CHUNK]
        g = torch.softmax(x_k @ w.t(), -1) - torch.softmax(tx[start : start + CHUNK] @ tw.t(), -1)
        acc = torch.addmm(acc, g.t(), x_k)
    return acc


def test_each_chunk_of_a_merged_pair_has_its_own_root_where_a_chunk_has_two_matmuls_of_one_size():
    """The two largest matmuls of a pair's work are one chunk's student and teacher logits:
    ``chunk_order`` finds each chunk's root from the chunk's own operands, recorded on the
    merged step, so that both chunks of every pair keep their order."""
    args = torch.randn(V, H), torch.randn(BT, H), torch.randn(V, H), torch.randn(BT, 2 * H), torch.randn(V, 2 * H)
    graph = graph_of(two_heads_in_chunks, *args)
    assert accumulate_pairs.accumulate_in_pairs(graph) == BT // CHUNK // 2
    (chain,) = chunk_order.accumulation_chains(graph)
    roots = chunk_order.chunk_roots(chain)
    assert [root.args[0].args[2] for root in roots] == list(range(0, BT, CHUNK))  # a slice per chunk, in order


def test_flce_loop_in_pairs_holds_at_most_three_chunks_of_logits():
    """A pair's first chunk of dlogits waits for the second, plus their ``cat``: one or two
    chunks more than chunk by chunk, never the whole logits matrix."""
    if not chunk_order.supported():
        pytest.skip("no preserve_node_ordering in this torch: chunks are not ordered")
    x, w, onehot = flce_inputs(torch.bfloat16)
    compiled = compile_and_run(lambda x, w, y: flce_like(x, w, y, out_dtype=torch.float32), x, w, onehot, no_grad=True)
    (code,) = compiled.codes
    from workloads import CHUNK as FLCE_CHUNK, V as FLCE_V

    assert most_alive(code, (FLCE_CHUNK, FLCE_V)) <= 3 < CHUNKS


def test_merging_adds_no_guard_on_symbolic_sizes():
    """Shapes are compared without guards: a guard would recompile the loop for every
    other row count."""
    from torch._guards import detect_fake_mode

    def chain(acc, g, x):
        n = g.shape[0] // 4
        for k in range(4):
            acc = torch.addmm(acc, g[k * n : (k + 1) * n].t(), x[k * n : (k + 1) * n])
        return acc

    graph = make_fx(chain, tracing_mode="symbolic")(torch.randn(V, H), torch.randn(4 * CHUNK, V), torch.randn(4 * CHUNK, H)).graph
    shape_env = detect_fake_mode([n.meta["val"] for n in graph.nodes if "val" in n.meta]).shape_env
    guards = len(shape_env.guards)
    assert accumulate_pairs.accumulate_in_pairs(graph) == 2
    assert len(shape_env.guards) == guards


def separate_chunks_chain(acc, g1, g2, x):
    """Two steps whose ``g``s are separate tensors: merging them needs a ``cat``."""
    acc = torch.addmm(acc, g1.t(), x[:CHUNK])
    return torch.addmm(acc, g2.t(), x[CHUNK : 2 * CHUNK])


def separate_chunks_args(h=H):
    return torch.randn(V, h), torch.randn(CHUNK, V), torch.randn(CHUNK, V), torch.randn(2 * CHUNK, h)


@pytest.fixture
def no_memory_floor(monkeypatch):
    """A budget of only what the graph itself pays for: no floor, no share of the accumulator."""
    monkeypatch.setattr(pair_memory, "FLOOR_BYTES", 0)
    monkeypatch.setattr(pair_memory, "ACCUMULATOR_SHARE", 0.0)


def test_a_pair_costs_its_waiting_chunk_and_the_cat_of_its_pieces():
    graph = graph_of(separate_chunks_chain, *separate_chunks_args())
    (chain,) = accumulate_pairs.chains(graph)
    g_bytes = CHUNK * V * 4
    assert accumulate_pairs.pair_cost(*chain) == 3 * g_bytes  # g1 waits, cat([g1, g2]); x is one slice


def test_adjacent_slices_cost_no_memory_and_are_merged_within_any_budget(no_memory_floor):
    acc, g, x = torch.randn(V, H), torch.randn(4 * CHUNK, V), torch.randn(4 * CHUNK, H)
    graph = graph_of(functional_chain, acc, g, x)
    assert accumulate_pairs.accumulate_in_pairs(graph) == 2


def test_a_chain_over_its_memory_budget_is_left_alone(no_memory_floor):
    from torch._dynamo.utils import counters

    counters.clear()
    graph = graph_of(separate_chunks_chain, *separate_chunks_args())
    assert accumulate_pairs.accumulate_in_pairs(graph) == 0
    assert len(accumulations(graph)) == 2
    assert counters["inductor_addmm_fix"][f"{accumulate_pairs.NAME}:over_budget"] == 1


def test_a_narrowing_cast_of_the_result_pays_for_the_pairs(no_memory_floor):
    """Liger's fp32 accumulation ends in ``grad_weight.to(bf16)``: an allocation larger
    than a pair's extra chunks, made while the accumulator is alive."""

    def cast_at_the_end(acc, g1, g2, x):
        return separate_chunks_chain(acc, g1, g2, x).to(torch.bfloat16)

    wide = 8 * CHUNK  # the bf16 result (V x wide x 2 bytes) outweighs a pair (3 x CHUNK x V x 4)
    graph = graph_of(cast_at_the_end, *separate_chunks_args(wide))
    assert pair_memory.budget(accumulate_pairs.chains(graph)[0]) == V * wide * 2
    assert accumulate_pairs.accumulate_in_pairs(graph) == 1


def test_the_floor_budget_merges_small_chunks():
    graph = graph_of(separate_chunks_chain, *separate_chunks_args())
    assert pair_memory.budget(accumulate_pairs.chains(graph)[0]) == pair_memory.FLOOR_BYTES
    assert accumulate_pairs.accumulate_in_pairs(graph) == 1


def test_the_budget_variable_takes_the_place_of_the_bound(monkeypatch):
    graph = graph_of(separate_chunks_chain, *separate_chunks_args())
    (chain,) = accumulate_pairs.chains(graph)
    monkeypatch.setenv(settings.PAIR_BUDGET.variable, "0.5")
    assert pair_memory.budget(chain) == 2**19


def test_a_budget_variable_of_zero_leaves_pairs_that_cost_memory_alone(monkeypatch):
    monkeypatch.setenv(settings.PAIR_BUDGET.variable, "0")
    graph = graph_of(separate_chunks_chain, *separate_chunks_args())  # merged under the default floor
    assert accumulate_pairs.accumulate_in_pairs(graph) == 0
    assert len(accumulations(graph)) == 2


def test_a_budget_variable_over_a_pair_s_cost_merges_it(no_memory_floor, monkeypatch):
    graph = graph_of(separate_chunks_chain, *separate_chunks_args())  # over the budget without it
    (chain,) = accumulate_pairs.chains(graph)
    monkeypatch.setenv(settings.PAIR_BUDGET.variable, str(accumulate_pairs.pair_cost(*chain) / 2**20))
    assert accumulate_pairs.accumulate_in_pairs(graph) == 1


def test_a_narrowing_cast_still_pays_for_pairs_under_a_budget_variable_of_zero(monkeypatch):
    monkeypatch.setenv(settings.PAIR_BUDGET.variable, "0")
    wide = 8 * CHUNK
    graph = graph_of(lambda *a: separate_chunks_chain(*a).to(torch.bfloat16), *separate_chunks_args(wide))
    assert pair_memory.budget(accumulate_pairs.chains(graph)[0]) == V * wide * 2


@pytest.mark.parametrize("value", ["lots", "-1", "nan", "inf"])
def test_a_budget_variable_that_is_not_a_size_warns_once_and_keeps_the_default(value, monkeypatch):
    monkeypatch.setattr(settings.PAIR_BUDGET, "_warned", set())
    monkeypatch.setenv(settings.PAIR_BUDGET.variable, value)
    graph = graph_of(separate_chunks_chain, *separate_chunks_args())
    (chain,) = accumulate_pairs.chains(graph)
    with pytest.warns(RuntimeWarning, match=settings.PAIR_BUDGET.variable):
        assert pair_memory.budget(chain) == pair_memory.FLOOR_BYTES
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert pair_memory.budget(chain) == pair_memory.FLOOR_BYTES


def test_the_budget_variable_is_part_of_the_graph_cache_key(monkeypatch):
    monkeypatch.delenv(settings.PAIR_BUDGET.variable, raising=False)
    default = accumulate_pairs.cache_settings()
    monkeypatch.setenv(settings.PAIR_BUDGET.variable, "128")
    assert accumulate_pairs.cache_settings() != default


def status_line(capsys) -> str:
    from inductor_addmm_fix import cli

    assert cli.main([]) == 0
    return next(l for l in capsys.readouterr().out.splitlines() if l.startswith("  accumulate_pairs "))


def test_the_status_shows_the_budget_the_variable_sets(monkeypatch, capsys):
    monkeypatch.setenv(settings.PAIR_BUDGET.variable, "80")
    assert status_line(capsys).endswith(f"; pair budget 80 MiB ({settings.PAIR_BUDGET.variable})")


def test_the_status_says_a_budget_value_that_is_not_a_size_is_ignored(monkeypatch, capsys):
    monkeypatch.setenv(settings.PAIR_BUDGET.variable, "lots")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        line = status_line(capsys)
    assert not [w for w in caught if settings.PAIR_BUDGET.variable in str(w.message)]  # reported, not warned
    assert line.endswith(f"; {settings.PAIR_BUDGET.variable}='lots' ignored")


def test_without_the_variable_the_status_says_only_applied(monkeypatch, capsys):
    monkeypatch.delenv(settings.PAIR_BUDGET.variable, raising=False)
    assert re.search(r"applied \(\d+ patch(es)?\)$", status_line(capsys))


def test_symbolic_sizes_are_costed_at_their_hints_without_a_warning():
    import warnings

    g = torch.randn(4 * CHUNK, V)
    graph = make_fx(functional_chain, tracing_mode="symbolic")(torch.randn(V, H), g, torch.randn(4 * CHUNK, H)).graph
    (placeholder,) = [n for n in graph.nodes if n.op == "placeholder" and n.name.startswith("g")]
    assert not all(isinstance(s, int) for s in placeholder.meta["val"].shape)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # torch 2.11 deprecates hint_int with a FutureWarning
        assert pair_memory.value_bytes(placeholder.meta["val"]) == g.numel() * g.element_size()


# ---------------------------------------------------------------- rows of one tensor, symbolic bounds
def symbols(**ranges):
    """Backed symbolic ints of one ShapeEnv, each with a hint and a value range (lower,
    upper; None: unbounded), as Dynamo makes them for sizes and ints of a frame."""
    import sympy
    from torch._dynamo.source import ConstantSource
    from torch.fx.experimental.symbolic_shapes import DimDynamic, ShapeEnv
    from torch.utils._sympy.value_ranges import ValueRanges

    env = ShapeEnv()
    out = {}
    for name, (hint, lower) in ranges.items():
        symbol = env.create_symbol(hint, ConstantSource(name), dynamic_dim=DimDynamic.DYNAMIC, positive=None)
        env.var_to_range[symbol] = ValueRanges(lower if lower is not None else -sympy.oo, sympy.oo)
        out[name] = env.create_symintnode(symbol, hint=hint)
    return out


def bound_nodes(*values) -> list:
    """Each value as a graph node holding it (as a slice bound appears in a graph)."""
    graph = fx.Graph()
    nodes = []
    for i, value in enumerate(values):
        node = graph.placeholder(f"b{i}")
        node.meta["val"] = value
        nodes.append(node)
    return nodes


def adjacent(*ranges) -> bool:
    """symbolic_adjacent of row ranges [(start, end), ...] given as SymInts or ints."""
    nodes = bound_nodes(*(b for r in ranges for b in r))
    return adjacent_slices.symbolic_adjacent(nodes[0::2], nodes[1::2])


def test_liger_chunks_of_a_symbolic_row_count_are_adjacent_rows():
    """``x[k*c : min((k+1)*c, bt)]`` for consecutive k: one slice, whatever bt's sign (a
    Python int of the resumed frame, of no known range)."""
    s = symbols(c=(256, 0), bt=(1536, None))
    c, bt = s["c"], s["bt"]
    for k in (0, 2):
        assert adjacent((k * c, torch.sym_min((k + 1) * c, bt)), ((k + 1) * c, torch.sym_min((k + 2) * c, bt)))


def test_symbolic_rows_with_a_gap_or_other_clamps_are_not_adjacent():
    s = symbols(c=(256, 0), bt=(1536, None), other=(1536, None))
    c, bt, other = s["c"], s["bt"], s["other"]
    assert not adjacent((0, torch.sym_min(c, bt)), (c + 1, torch.sym_min(2 * c, bt)))  # a row between
    assert not adjacent((0, torch.sym_min(c, bt)), (c, torch.sym_min(2 * c, other)))  # clamped by another size
    assert not adjacent((0, torch.sym_min(2 * c, bt)), (c, torch.sym_min(3 * c, bt)))  # overlapping


def test_symbolic_rows_are_adjacent_only_in_a_known_order():
    s = symbols(c=(256, None), n=(1536, 0), d=(512, 0))
    c, n, d = s["c"], s["n"], s["d"]
    assert not adjacent((0, torch.sym_min(c, n)), (c, torch.sym_min(2 * c, n)))  # c may be negative
    assert adjacent((0, n), (n, 2 * n))  # each end the next start, sizes of known sign
    assert not adjacent((0, n), (n, d))  # the last end may come before its start


def accumulate_symbolic_chunks(acc, g, x, chunk: int, rows: int):
    """Liger's loop over a row count and a chunk size that are ints of the frame (symbolic
    once they change): the last chunk is cut at ``rows``."""
    for k in range((rows + chunk - 1) // chunk):
        start, end = k * chunk, min((k + 1) * chunk, rows)
        acc = torch.addmm(acc, g[start:end].t(), x[start:end])
    return acc


def test_merged_pairs_of_symbolic_chunks_read_one_slice_of_x():
    acc, g, x = torch.randn(V, H), torch.randn(BT, V), torch.randn(BT, H)
    compiled = compile_and_run(accumulate_symbolic_chunks, acc, g, x, CHUNK, BT, dynamic=True)
    assert compiled.events("accumulate_pairs") == {"chains": 1, "pairs": 3}
    assert re.search(r"\bs\d+\b", compiled.code)  # the control: the bounds are symbolic
    # g's and x's chunks are slices of one tensor each: no cat (whose pieces are aliases of its buffer).
    assert "# alias" not in compiled.code
    expected = accumulate_symbolic_chunks(acc.double(), g.double(), x.double(), CHUNK, BT)
    torch.testing.assert_close(compiled.result.double(), expected, rtol=1e-4, atol=1e-4)


# ---------------------------------------------------------------- pairs read where they lie
@pytest.fixture
def splitter(monkeypatch):
    """A splitter that takes every pair, with the package's ``addmm_pair`` op (on the CPU
    its two steps run one after the other)."""
    from inductor_addmm_fix.inductor import accumulate_kernel

    op = accumulate_kernel.addmm_pair_op()
    monkeypatch.setitem(fx_support.SPLITTERS, "test", lambda first, second: op)
    return op


def test_a_split_pair_costs_only_its_waiting_chunk():
    graph = graph_of(separate_chunks_chain, *separate_chunks_args())
    (chain,) = accumulate_pairs.chains(graph)
    assert accumulate_pairs.pair_cost(*chain, split=True) == CHUNK * V * 4  # g1 waits; no cat


def test_a_pair_a_splitter_takes_is_one_step_with_each_chunk_where_it_lies(splitter):
    args = separate_chunks_args()
    module = make_fx(separate_chunks_chain, tracing_mode="fake")(*args)
    assert accumulate_pairs.accumulate_in_pairs(module.graph) == 1
    (step,) = [n for n in module.graph.nodes if n.target is splitter]
    assert step.meta[fx_support.CHUNKS_PER_STEP] == 2
    assert not [n for n in module.graph.nodes if n.target is aten.cat.default] and not accumulations(module.graph)
    module.recompile()
    torch.testing.assert_close(module(*args), separate_chunks_chain(*args), rtol=1e-5, atol=1e-5)


def test_a_chain_too_large_to_stack_is_split_within_its_budget(splitter, monkeypatch):
    monkeypatch.setattr(pair_memory, "FLOOR_BYTES", CHUNK * V * 4)  # one chunk: a cat's three are over
    monkeypatch.setattr(pair_memory, "ACCUMULATOR_SHARE", 0.0)
    graph = graph_of(separate_chunks_chain, *separate_chunks_args())
    assert accumulate_pairs.accumulate_in_pairs(graph) == 1
    assert [n for n in graph.nodes if n.target is splitter]


def test_a_chain_over_its_budget_even_split_is_left_alone(splitter, no_memory_floor):
    graph = graph_of(separate_chunks_chain, *separate_chunks_args())
    assert accumulate_pairs.accumulate_in_pairs(graph) == 0
    assert len(accumulations(graph)) == 2


def test_slices_of_one_tensor_stay_one_step_even_with_a_splitter(splitter):
    acc, g, x = torch.randn(V, H), torch.randn(4 * CHUNK, V), torch.randn(4 * CHUNK, H)
    graph = graph_of(functional_chain, acc, g, x)
    assert accumulate_pairs.accumulate_in_pairs(graph) == 2
    assert len(accumulations(graph)) == 2 and not [n for n in graph.nodes if n.target is splitter]


def test_chunk_order_follows_a_chain_of_split_pairs_and_a_last_step(splitter):
    """Three chunks: a split pair, then the odd chunk's ``addmm``: one chain of two steps."""
    def chain(acc, g1, g2, g3, x):
        acc = torch.addmm(acc, g1.t(), x[:CHUNK])
        acc = torch.addmm(acc, g2.t(), x[CHUNK : 2 * CHUNK])
        return torch.addmm(acc, g3.t(), x[2 * CHUNK : 3 * CHUNK])

    graph = graph_of(chain, torch.randn(V, H), *(torch.randn(CHUNK, V) for _ in range(3)), torch.randn(3 * CHUNK, H))
    assert accumulate_pairs.accumulate_in_pairs(graph) == 1
    (found,) = chunk_order.accumulation_chains(graph)
    assert [n.target for n in found] == [splitter, aten.addmm.default]
