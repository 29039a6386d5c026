"""Token tries as arrays, answers tokenized in context, and the terminator."""

from __future__ import annotations

import numpy as np
import pytest

from calbench.answer_tokens import answer_tokens, terminator
from calbench.families import make_target
from calbench.prompt import prompt_text, render
from calbench.space import canonical_space
from calbench.tiny import CHATML
from calbench.trie import build_trie
from tests.helpers import in_context_tokens, load_tokenizer

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
    tok = load_tokenizer(request.getfixturevalue(model))
    target = make_target("gaussian", {"mu": 3.5, "sigma": 3})
    rendered = render(tok, prompt_text(target))
    answers = list(canonical_space(target, 5, 300).strings)
    end = terminator(tok, chat=bool(tok.chat_template))
    got = answer_tokens(tok, rendered, answers, end)
    assert got == [[*ids, end] for ids in in_context_tokens(tok, rendered, answers)]


@pytest.mark.parametrize("model", ["tiny_split", "tiny_merge"])
def test_answer_tokens_for_a_base_prompt_and_a_negative_integer_space(model, request):
    tok = load_tokenizer(request.getfixturevalue(model))
    target = make_target("gaussian", {"mu": -20, "sigma": 9})
    rendered = prompt_text(target) + "\n"  # base models: the prompt, then a line break
    answers = list(canonical_space(target, 0, 400).strings)
    assert answer_tokens(tok, rendered, answers, None) == in_context_tokens(tok, rendered, answers)


def test_answer_tokens_cache_stays_exact_when_full(tiny_split, monkeypatch):
    import calbench.answer_tokens as trie_module

    monkeypatch.setattr(trie_module, "_ALONE_MAX", 250)
    tok = load_tokenizer(tiny_split)
    for mu, bins in ((0, 200), (1, 200), (0, 120)):  # overlapping spaces; the cache overflows and is cleared
        target = make_target("gaussian", {"mu": mu, "sigma": 2})
        rendered = render(tok, prompt_text(target))
        answers = list(canonical_space(target, 2, bins).strings)
        assert answer_tokens(tok, rendered, answers, None) == in_context_tokens(tok, rendered, answers)
        assert len(trie_module._ALONE[tok]) <= 250


def _byte_level_bpe_tokenizer():
    # GPT-2-style: byte-level pre-tokenizer with its regex, BPE merges inside digit runs.
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    rng = np.random.default_rng(0)
    corpus = [f"Say {x:.3f} or {int(x)} now.\n" for x in rng.normal(0, 400, 3000)]
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=600, special_tokens=["<|end|>"], initial_alphabet=pre_tokenizers.ByteLevel.alphabet()
    )
    tok.train_from_iterator(corpus, trainer)
    return PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|end|>")


@pytest.mark.parametrize("added", [None, "12"])
def test_answer_tokens_from_bpe_words(added):
    import calbench.answer_tokens as trie_module

    tok = _byte_level_bpe_tokenizer()
    if added:  # an added token made of digits: words alone no longer give the answer's tokens
        tok.add_tokens([added])
    assert any(len(tok.convert_ids_to_tokens(i)) > 1 for i in tok("123456", add_special_tokens=False)["input_ids"])
    assert (trie_module._byte_level_bpe(tok) is None) == bool(added)
    for target, decimals in (
        (make_target("gaussian", {"mu": -3, "sigma": 40}), 3),
        (make_target("poisson", {"lambda": 900}), 0),
    ):
        rendered = prompt_text(target) + "\n<|end|>"
        answers = list(canonical_space(target, decimals, 500).strings)
        expected = in_context_tokens(tok, rendered, answers)
        assert answer_tokens(tok, rendered, answers, None) == expected
        if not added:
            assert trie_module._by_pieces(tok, answers) == expected


def test_answer_tokens_refuse_a_prompt_that_merges_with_the_answer(tiny_merge):
    tok = load_tokenizer(tiny_merge)
    with pytest.raises(ValueError, match="not a token boundary"):
        answer_tokens(tok, "Pick a number: 12", ["3", "34", "5"], None)


def test_answer_tokens_fall_back_to_whole_prompt_tokenization(tiny_merge, monkeypatch):
    # If the one-call tokenization disagrees with the probes, every answer is tokenized in context.
    import calbench.answer_tokens as trie_module

    tok = load_tokenizer(tiny_merge)
    target = make_target("poisson", {"lambda": 40})
    rendered = render(tok, prompt_text(target))
    answers = list(canonical_space(target).strings)
    monkeypatch.setattr(trie_module, "_joined", lambda tokenizer, prefix, texts: [[0] for _ in texts])
    got = answer_tokens(tok, rendered, answers, None)
    assert got == in_context_tokens(tok, rendered, answers)
    assert got[0] != [0]


def test_terminator_is_the_templates_end_of_turn(tiny_split, tiny_merge):
    chat = load_tokenizer(tiny_split)
    assert chat.convert_ids_to_tokens(terminator(chat, chat=True)) == "<|im_end|>"
    base = load_tokenizer(tiny_merge)
    assert terminator(base, chat=False) == base.eos_token_id
    # Gemma-style: EOS is <|endoftext|> but turns end with another special token.
    chat.eos_token = "<|endoftext|>"
    chat.chat_template = CHATML.replace("<|im_end|>", "<|im_start|>")
    assert chat.convert_ids_to_tokens(terminator(chat, chat=True)) == "<|im_start|>"
    chat.chat_template = None
    assert chat.convert_ids_to_tokens(terminator(chat, chat=True)) == "<|endoftext|>"
