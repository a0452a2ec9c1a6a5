"""Declared order (issue 49): patches whose BackendSelect fixes share an aten overload, or whose
wrappers share an attribute, declare their order (``Patch.after``/``before``); the registry
installs in it, and each chain is sorted by it when a fix joins."""
import itertools

import pytest

import dmlshim
from dmlshim import patches
from dmlshim.patches import _select, _wrap, dispatcher

NAMES = [p.name for p in patches.REGISTRY]


def _declared_before():
    """``{name: every name declared (directly or through others) to come after it}``."""
    later = {name: set() for name in NAMES}
    for p in patches.REGISTRY:
        later[p.name].update(p.before)
        for first in p.after:
            later[first].add(p.name)
    closure = {}
    for name in NAMES:
        seen, stack = set(), [name]
        while stack:
            for nxt in later[stack.pop()] - seen:
                seen.add(nxt)
                stack.append(nxt)
        closure[name] = seen
    return closure


def _undeclared(chains):
    """The pairs of patches of one chain that no declaration relates, with an overload."""
    after = _declared_before()
    return sorted({(a, b, str(op)) for op, owners in chains.items()
                   for a, b in itertools.combinations(sorted(set(owners)), 2)
                   if b not in after[a] and a not in after[b]})


def _in_declared_order(owners) -> bool:
    return list(owners) == sorted(owners, key=patches.rank)


def test_rank_keeps_every_declaration():
    position = {name: patches.rank(name) for name in NAMES}
    assert sorted(position.values()) == list(range(len(NAMES)))
    broken = [(p.name, o) for p in patches.REGISTRY for o in p.after if position[o] > position[p.name]]
    broken += [(p.name, o) for p in patches.REGISTRY for o in p.before if position[o] < position[p.name]]
    assert not broken
    assert patches.rank("not_a_patch") == len(NAMES)          # a test's Kernels: after them all


def test_every_two_patches_of_a_chain_declare_their_order():
    """From every patch module's Kernels tables (installed or not, whatever a device's probes
    switch on): each two patches holding one overload are related by after=/before=."""
    held = patches.held()
    assert {o for owners in held.values() for o in owners} <= set(NAMES)   # owners are patch names
    shared = {op: owners for op, owners in held.items() if len(owners) > 1}
    assert shared                                       # the check checks something
    undeclared = _undeclared(shared)
    assert not undeclared, f"declare after=/before= in the modules' PATCH for these: {undeclared}"
    assert all(_in_declared_order(owners) for owners in held.values())


@pytest.fixture
def every_fix(dml_device, monkeypatch):
    monkeypatch.setenv("DMLSHIM_PROBE", "off")                 # every fix on
    dmlshim.deactivate()
    dmlshim.activate(fallback="known", trace=0)
    yield dmlshim._ctx
    dmlshim.deactivate()


def _registered():
    """The installed chains' owners and fixes, and the net's hooks' owners."""
    return (dict(_select._chains), _select.chains(),
            {base: dispatcher.hook_owners(base) for base in dispatcher.hooks})


def test_installed_chains_and_hooks_follow_the_declaration(every_fix):
    chains = _select.chains()
    hooked = {base: dispatcher.hook_owners(base) for base in dispatcher.hooks}
    assert any(len(owners) > 1 for owners in chains.values())
    assert all(_in_declared_order(owners) for owners in [*chains.values(), *hooked.values()])
    undeclared = _undeclared({**chains, **hooked})
    assert not undeclared, f"declare after=/before= in the modules' PATCH for these: {undeclared}"
    assert all(len(_select._chains[op]) == len(owners) for op, owners in chains.items())


def test_every_two_patches_wrapping_one_attribute_declare_their_order(every_fix):
    """Python-level wrappers stack in install order (the last installed runs first), so two
    patches that wrap one attribute (``Tensor.copy_``: broadcast_copy, copy_to_cpu, rank_limit,
    int_range; auto's retry around most of torch) are related by after=/before= too."""
    shared = {f"{owner}.{attr}": names for (owner, attr), names in _wrap.wrapped().items() if len(names) > 1}
    assert ("broadcast_copy", "copy_to_cpu", "int_range", "rank_limit") == shared["Tensor.copy_"]
    assert not _undeclared(shared), "declare after=/before= in the modules' PATCH for these"


# patches that are not last in some chain (int_range: in the net's hooks too) and wrap no
# Python entry point another patch wraps after them (so uninstalling one alone is clean)
@pytest.mark.parametrize("name", ["gather", "empty_unary", "int_range"])
def test_a_patch_installed_again_takes_its_declared_place(every_fix, name):
    """Uninstalled and installed again (last in install order), a patch's fixes go back to
    where they were, in every chain and hook tuple: not to the end."""
    before = _registered()
    module = patches._installed[name]
    shared = [op for op, owners in before[1].items() if name in owners and owners[-1] != name]
    assert shared                               # first or middle of some chain: a real move
    module.uninstall()
    assert all(name not in owners for owners in _select.chains().values())
    module.install(every_fix)
    assert _registered() == before


# Two chains whose registry order was wrong (issue 49): a fix that computes its call below the
# chain (a fixed call redispatched, _select.itself) went before one the call needed.

def test_integer_baddbmm_of_a_fractional_alpha_with_a_cpu_operand_gets_torchs_error(every_fix, dml_device):
    """bmm_cpu_operand first: int_addmm's fixed call reached the kernel that ends the process."""
    import torch
    a, b = torch.ones(2, 3, 4, dtype=torch.int64, device=dml_device), torch.ones(2, 4, 5, dtype=torch.int64)
    with pytest.raises(RuntimeError, match="Expected all tensors to be on the same device"):
        torch.baddbmm(torch.zeros(2, 3, 5, dtype=torch.int64, device=dml_device), a, b, alpha=0.5)


def test_unique_of_int64_values_past_32_bits_in_two_dimensions(every_fix, dml_device):
    """int_range before unique_bytes: unique_bytes' flattened call ran past int_range's guard."""
    import torch
    x = torch.tensor([[2**40 + 1, 2**40 + 2], [5, 2**40 + 1]])
    assert torch.unique(x.to(dml_device)).cpu().tolist() == torch.unique(x).tolist()
