"""Token tries as arrays, answers tokenized in context, and the terminator."""

from __future__ import annotations

import numpy as np
import pytest
from transformers import AutoTokenizer

from calbench.families import make_target
from calbench.prompt import prompt_text, render
from calbench.space import canonical_space
from calbench.tiny import CHATML
from calbench.trie import answer_tokens, build_trie, terminator

SEQS = [[5, 1, 9], [5, 1, 8], [5, 2, 9], [7, 9]]
MASS = np.array([0.1, 0.2, 0.3, 0.4])


def test_trie_structure_and_targets():
    trie = build_trie(SEQS, MASS)
    assert trie.paths() == SEQS
    assert trie.n_nodes == 1 + 2 + 3 + 3  # root; 5, 7; 5-1, 5-2, 7-9; 5-1-9, 5-1-8, 5-2-9
    assert np.all(np.diff(trie.depth) >= 0)  # breadth-first ids: ancestors come first
    np.testing.assert_allclose(trie.mass[trie.ends], MASS)
    q = trie.q()
    for node in range(trie.n_nodes):  # targets at every inner node sum to one
        kids = trie.children(node)
        if kids.size:
            assert q[kids].sum() == pytest.approx(1.0)
            assert np.all(trie.parent[kids] == node)
    # q(5 | root) = 0.6 and q(1 | 5) = 0.3 / 0.6, from the masses through each node.
    five = trie.children(0)[trie.tokens[trie.children(0)] == 5][0]
    one = trie.children(five)[trie.tokens[trie.children(five)] == 1][0]
    assert q[five] == pytest.approx(0.6) and q[one] == pytest.approx(0.5)


def test_string_nodes_follow_each_path():
    trie = build_trie(SEQS, MASS)
    nodes = trie.string_nodes()
    for row, seq in zip(nodes, SEQS, strict=True):
        path = row[row >= 0]
        assert trie.tokens[path].tolist() == seq
        assert trie.depth[path].tolist() == list(range(1, len(seq) + 1))


def test_prefixes_need_a_terminator():
    with pytest.raises(ValueError, match="prefix"):
        build_trie([[1, 2], [1, 2, 3]])
    trie = build_trie([[1, 2], [1, 2, 3]], allow_prefixes=True)  # lm-eval's arbitrary continuations
    assert trie.paths() == [[1, 2], [1, 2, 3]]
    with pytest.raises(ValueError, match="empty"):
        build_trie([[1], []])


def test_large_space_builds():
    rng = np.random.default_rng(0)
    seqs = [[*rng.integers(0, 12, size=rng.integers(3, 12)), 99] for _ in range(16384)]
    trie = build_trie(seqs, np.full(16384, 1 / 16384))
    assert trie.paths()[:50] == [list(map(int, s)) for s in seqs[:50]]
    assert trie.mass[0] == pytest.approx(1.0)


@pytest.mark.parametrize("model", ["tiny_split", "tiny_merge"])
def test_answer_tokens_match_whole_prompt_tokenization(model, request):
    tok = AutoTokenizer.from_pretrained(request.getfixturevalue(model))
    target = make_target("gaussian", {"mu": 3.5, "sigma": 3})
    rendered = render(tok, prompt_text(target))
    answers = list(canonical_space(target, 5, 300).strings)
    end = terminator(tok, chat=bool(tok.chat_template))
    got = answer_tokens(tok, rendered, answers, end)
    whole = tok(rendered, add_special_tokens=False)["input_ids"]
    for answer, ids in zip(answers, got, strict=True):
        joint = tok(rendered + answer, add_special_tokens=False)["input_ids"]
        assert joint[: len(whole)] == whole
        assert ids == [*joint[len(whole) :], end]


@pytest.mark.parametrize("model", ["tiny_split", "tiny_merge"])
def test_answer_tokens_for_a_base_prompt_and_a_negative_integer_space(model, request):
    tok = AutoTokenizer.from_pretrained(request.getfixturevalue(model))
    target = make_target("gaussian", {"mu": -20, "sigma": 9})
    rendered = prompt_text(target) + "\n"  # base models: the prompt, then a line break
    answers = list(canonical_space(target, 0, 400).strings)
    got = answer_tokens(tok, rendered, answers, None)
    whole = tok(rendered, add_special_tokens=False)["input_ids"]
    assert got == [tok(rendered + a, add_special_tokens=False)["input_ids"][len(whole) :] for a in answers]


def test_answer_tokens_cache_stays_exact_when_full(tiny_split, monkeypatch):
    import calbench.trie as trie_module

    monkeypatch.setattr(trie_module, "_ALONE_MAX", 250)
    tok = AutoTokenizer.from_pretrained(tiny_split)
    for mu, bins in ((0, 200), (1, 200), (0, 120)):  # overlapping spaces; the cache overflows and is cleared
        target = make_target("gaussian", {"mu": mu, "sigma": 2})
        rendered = render(tok, prompt_text(target))
        answers = list(canonical_space(target, 2, bins).strings)
        whole = tok(rendered, add_special_tokens=False)["input_ids"]
        expected = [tok(rendered + a, add_special_tokens=False)["input_ids"][len(whole) :] for a in answers]
        assert answer_tokens(tok, rendered, answers, None) == expected
        assert len(trie_module._ALONE[tok]) <= 250


def test_answer_tokens_fall_back_to_whole_prompt_tokenization(tiny_merge, monkeypatch):
    # If the one-call tokenization disagrees with the probes, every answer is tokenized in context.
    import calbench.trie as trie_module

    tok = AutoTokenizer.from_pretrained(tiny_merge)
    target = make_target("poisson", {"lambda": 40})
    rendered = render(tok, prompt_text(target))
    answers = list(canonical_space(target).strings)
    monkeypatch.setattr(trie_module, "_joined", lambda tokenizer, prefix, texts: [[0] for _ in texts])
    got = answer_tokens(tok, rendered, answers, None)
    whole = tok(rendered, add_special_tokens=False)["input_ids"]
    assert got == [tok(rendered + a, add_special_tokens=False)["input_ids"][len(whole) :] for a in answers]
    assert got[0] != [0]


def test_terminator_is_the_templates_end_of_turn(tiny_split, tiny_merge):
    chat = AutoTokenizer.from_pretrained(tiny_split)
    assert chat.convert_ids_to_tokens(terminator(chat, chat=True)) == "<|im_end|>"
    base = AutoTokenizer.from_pretrained(tiny_merge)
    assert terminator(base, chat=False) == base.eos_token_id
    # Gemma-style: EOS is <|endoftext|> but turns end with another special token.
    chat.eos_token = "<|endoftext|>"
    chat.chat_template = CHATML.replace("<|im_end|>", "<|im_start|>")
    assert chat.convert_ids_to_tokens(terminator(chat, chat=True)) == "<|im_start|>"
    chat.chat_template = None
    assert chat.convert_ids_to_tokens(terminator(chat, chat=True)) == "<|endoftext|>"
