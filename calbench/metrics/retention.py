"""The offline retention suite's items and checkers (pure): what calibration training may cost.

Three item sets that need no download, each deterministic per ``(seed, VERSION)``:

* **arithmetic**: problems of graded difficulty (``ARITHMETIC_LEVELS``: one- to three-digit
  addition, subtraction and multiplication, and two-step word problems), with the answer an
  integer. ``strict_number``: the whole answer, stripped, is the number (digits, optional
  minus sign). ``flexible_number``: the last number in the answer, extracted as lm-eval's
  GSM8K "flexible-extract" does (regex ``(-?[$0-9.,]{2,})|(-?[0-9]+)``, last match; ``,``,
  ``$`` and a trailing ``.`` removed before comparing).
* **mmlu_mini**: the 4-option MMLU questions with answers that lm-eval itself installs
  (``lm_eval/tasks/mmlu/flan_cot_fewshot/_cot_prompts.json``: the chain-of-thought exemplars,
  up to 5 per subject for the 57 subjects), read from the installed package at run time
  (``calbench.lm_eval_io.mmlu_exemplars``).
  Blocks that are not one question with options (A)-(D) and an answer among them are left
  out (``mmlu_questions`` reports how many).
* **format_following**: instructions whose compliance code can check (``FORMAT_KINDS``), one
  per prompt, on neutral topics. Scored in the manner of IFEval: ``strict`` checks the
  response as it is; ``loose`` passes if any of its variants passes (the response without its
  first line, its last line or both, each with and without ``*`` characters).

Words are ``\\w+`` runs joined by apostrophes or hyphens; lines are the non-empty lines of
the stripped response.
"""

from __future__ import annotations

import json
import random
import re
from collections.abc import Callable, Mapping
from typing import Any

from calbench.metrics import mcq
from calbench.parse import strip_think
from calbench.stats import seed_for

VERSION = 1  # of every generator below: a change to any item bumps it (and the tasks' versions)

# ---------------------------------------------------------------- arithmetic

ARITHMETIC_LEVELS = ("add_1", "add_2", "add_3", "sub_1", "sub_2", "sub_3", "mul_1", "mul_2", "mul_3", "word_2step")
NAMES = ("Ana", "Ben", "Chloe", "Dev", "Emma", "Farid", "Grace", "Hiro", "Ines", "Jonas")
THINGS = ("apples", "stamps", "marbles", "books", "coins", "stickers", "pencils", "shells")
_WORD = (
    ("{name} has {a} {things}. {name} buys {b} more and then gives away {c}. How many {things} does {name} have now?",
     lambda a, b, c: a + b - c),
    ("{name} packs {a} boxes with {b} {things} in each box, then adds {c} loose {things}. How many {things} is that "
     "in all?", lambda a, b, c: a * b + c),
    ("A shelf holds {a} {things}. {name} fills {b} shelves and takes {c} {things} away. How many {things} are left on "
     "the shelves?", lambda a, b, c: a * b - c),
    ("{name} had {a} {things} and sold {b} of them. Then {name} shared the rest equally among {c} friends, with none "
     "left over. How many {things} did each friend get?", lambda a, b, c: (a - b) // c),
)  # fmt: skip
SHARING = 3  # the template whose numbers must divide evenly


def _digits(rng: random.Random, k: int) -> int:
    return rng.randint(1 if k == 1 else 10 ** (k - 1), 10**k - 1)


def _word_problem(rng: random.Random) -> tuple[str, int]:
    which = rng.randrange(len(_WORD))
    template, answer = _WORD[which]
    name, things = rng.choice(NAMES), rng.choice(THINGS)
    if which == SHARING:  # a - b a multiple of c, at least 2 each
        c = rng.randint(2, 9)
        b = rng.randint(1, 30)
        a = b + c * rng.randint(2, 20)
    else:  # c below a + b and a * b: a positive answer
        a, b = rng.randint(2, 60), rng.randint(2, 30)
        c = rng.randint(1, a + b - 1)
    return template.format(name=name, things=things, a=a, b=b, c=c), int(answer(a, b, c))


def arithmetic_items(per_level: int = 20, seed: int = 0) -> list[dict[str, Any]]:
    """``per_level`` problems per level, in level order: ``{"id", "level", "question", "answer"}``."""
    items = []
    for level in ARITHMETIC_LEVELS:
        rng = random.Random(seed_for("arithmetic", VERSION, seed, level))
        for i in range(per_level):
            if level == "word_2step":
                question, answer = _word_problem(rng)
            else:
                op, k = level.split("_")
                a, b = _digits(rng, int(k)), _digits(rng, int(k))
                if op == "sub" and b > a:
                    a, b = b, a
                symbol = {"add": "+", "sub": "-", "mul": "\u00d7"}[op]
                answer = {"add": a + b, "sub": a - b, "mul": a * b}[op]
                question = f"What is {a} {symbol} {b}?"
            items.append({"id": f"{level}/{i}", "level": level, "question": question, "answer": answer})
    return items


def arithmetic_prompt(question: str) -> str:
    return f"{question}\nAnswer with the final number only."


_STRICT_NUMBER = re.compile(r"-?\d+")
_FLEXIBLE_NUMBER = re.compile(r"(-?[$0-9.,]{2,})|(-?[0-9]+)")


def strict_number(response: str) -> int | None:
    """The answer's number when the whole stripped answer is one (digits, optional minus), else None."""
    text = strip_think(response).strip()
    return int(text) if _STRICT_NUMBER.fullmatch(text) else None


def flexible_number(response: str) -> str | None:
    """The last number in the answer, normalised as lm-eval's GSM8K flexible match compares it."""
    matches = _FLEXIBLE_NUMBER.findall(strip_think(response))
    if not matches:
        return None
    found = next(g for g in matches[-1] if g)
    return re.sub(r"\.$", "", found.replace(",", "").replace("$", ""))


def arithmetic_scores(response: str, answer: int) -> dict[str, float]:
    return {
        "exact_strict": float(strict_number(response) == answer),
        "exact_flexible": float(flexible_number(response) == str(answer)),
    }


# ---------------------------------------------------------------- mmlu_mini

_OPTIONS = re.compile(r"\(A\)\s*(?P<A>.*?)\s*\(B\)\s*(?P<B>.*?)\s*\(C\)\s*(?P<C>.*?)\s*\(D\)\s*(?P<D>.*?)\s*", re.S)
_ANSWER = re.compile(r"The answer is \(([A-Z])\)")


def mmlu_questions(exemplars: Mapping[str, str]) -> tuple[list[dict[str, Any]], int]:
    """The parsed questions ``{"id", "subject", "question", "choices", "answer"}`` (answer: 0-3) of
    lm-eval's MMLU exemplars (subject -> its text: ``calbench.lm_eval_io.mmlu_exemplars``) and how
    many exemplar blocks were left out (not one 4-option question with an answer among A-D)."""
    items, skipped = [], 0
    for subject, text in exemplars.items():
        blocks = text.split("\n\nQ: ")[1:]
        for i, block in enumerate(blocks):
            question, _, reasoning = block.partition("\nA: ")
            start = question.rfind("\n(A)")
            options = _OPTIONS.fullmatch(question[start + 1 :]) if start >= 0 else None
            answers = _ANSWER.findall(reasoning)
            if options is None or not answers or answers[-1] not in "ABCD":
                skipped += 1
                continue
            items.append(
                {
                    "id": f"{subject}/{i}",
                    "subject": subject,
                    "question": question[:start].strip(),
                    "choices": [options[x] for x in "ABCD"],
                    "answer": "ABCD".index(answers[-1]),
                }
            )
    return items, skipped


def mmlu_prompt(item: Mapping[str, Any]) -> str:
    subject = item["subject"].replace("_", " ")
    options = "\n".join(f"{x}. {c}" for x, c in zip("ABCD", item["choices"], strict=True))
    return f"The following is a multiple choice question about {subject}.\n\n{item['question']}\n{options}\nAnswer:"


# ---------------------------------------------------------------- format_following

TOPICS = (
    "the ocean", "a city at night", "learning to cook", "a rainy day", "your favourite season", "trains",
    "a garden in spring", "the moon", "an old library", "friendship", "mountains", "a busy market",
    "the history of paper", "bicycles", "a quiet village", "coffee", "winter mornings", "a lighthouse",
    "music", "a long journey",
)  # fmt: skip
WORDS = ("river", "golden", "window", "silver", "forest", "lantern", "harbor", "velvet", "meadow", "thunder")
JSON_KEYS = ("title", "summary", "answer", "topic", "mood")
FORMAT_KINDS = (
    "word_count", "line_count", "lowercase", "uppercase", "end_word", "json_key", "include_word", "avoid_word",
    "mcq_format",
)  # fmt: skip
_MCQ_FORMAT = "\n".join(mcq.PROMPT.split("\n")[-7:])  # the seven-line format of the MCQ task


def format_instruction(kind: str, args: Mapping[str, Any]) -> str:
    return {
        "word_count": "Answer in exactly {n} words.",
        "line_count": "Answer in exactly {n} lines.",
        "lowercase": "Write your whole answer in lowercase letters; no capital letters at all.",
        "uppercase": "Write your whole answer in capital letters only.",
        "end_word": "End your answer with the word '{word}', with nothing after it.",
        "json_key": 'Answer with a JSON object only, with the key "{key}".',
        "include_word": "Use the word '{word}' in your answer.",
        "avoid_word": "Do not use the word '{word}' anywhere in your answer.",
        "mcq_format": "Write one multiple-choice question with four options about it. Use exactly this format and "
        "nothing else:\n" + _MCQ_FORMAT,
    }[kind].format(**args)


def format_items(per_kind: int = 10, seed: int = 0) -> list[dict[str, Any]]:
    """``per_kind`` prompts per instruction kind: ``{"id", "kind", "args" (JSON), "prompt"}``."""
    items = []
    for kind in FORMAT_KINDS:
        rng = random.Random(seed_for("format_following", VERSION, seed, kind))
        for i in range(per_kind):
            topic = rng.choice(TOPICS)
            args: dict[str, Any] = {}
            if kind == "word_count":
                args = {"n": rng.randint(5, 40)}
            elif kind == "line_count":
                args = {"n": rng.randint(2, 6)}
            elif kind in ("end_word", "include_word"):
                args = {"word": rng.choice(WORDS)}
            elif kind == "avoid_word":  # a word the topic invites
                args = {"word": topic.split()[-1]}
            elif kind == "json_key":
                args = {"key": rng.choice(JSON_KEYS)}
            prompt = f"Write about {topic}. {format_instruction(kind, args)}"
            items.append(
                {"id": f"{kind}/{i}", "kind": kind, "args": json.dumps(args, sort_keys=True), "prompt": prompt}
            )
    return items


def words(text: str) -> list[str]:
    return re.findall(r"\w+(?:['\u2019-]\w+)*", text)


def _json_object(text: str) -> Any:
    body = text.strip()
    fence = re.fullmatch(r"```(?:json)?\s*(.*?)\s*```", body, re.S | re.I)
    try:
        return json.loads(fence.group(1) if fence else body)
    except ValueError:
        return None


def _has_word(text: str, word: str) -> bool:
    return re.search(rf"\b{re.escape(word)}\b", text, re.IGNORECASE) is not None


CHECKS: dict[str, Callable[[str, Mapping[str, Any]], bool]] = {
    "word_count": lambda r, a: len(words(r)) == a["n"],
    "line_count": lambda r, a: len([line for line in r.strip().splitlines() if line.strip()]) == a["n"],
    "lowercase": lambda r, a: any(c.isalpha() for c in r) and r == r.lower(),
    "uppercase": lambda r, a: any(c.isalpha() for c in r) and r == r.upper(),
    "end_word": lambda r, a: r.strip().lower().endswith(a["word"].lower()),
    "json_key": lambda r, a: isinstance(obj := _json_object(r), dict) and a["key"] in obj,
    "include_word": lambda r, a: _has_word(r, a["word"]),
    "avoid_word": lambda r, a: not _has_word(r, a["word"]),
    "mcq_format": lambda r, a: mcq.parse_strict(r) is not None,
}


def loose_variants(response: str) -> list[str]:
    """IFEval's loose variants: the response without its first line, last line or both, each also without ``*``."""
    lines = response.split("\n")
    cut = [response, "\n".join(lines[1:]).strip(), "\n".join(lines[:-1]).strip(), "\n".join(lines[1:-1]).strip()]
    return [v for c in cut for v in (c, c.replace("*", ""))]


def follows(kind: str, args: Mapping[str, Any], response: str) -> dict[str, float]:
    """Strict and loose compliance of a response with one instruction (think blocks removed first)."""
    text = strip_think(response)
    check = CHECKS[kind]
    return {
        "strict_acc": float(check(text, args)),
        "loose_acc": float(any(check(v, args) for v in loose_variants(text) if v.strip())),
    }
