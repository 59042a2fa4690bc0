"""A judge model: an instruct model asked, with the project's guidelines, which of two responses is better (A or
B), or whether one response is acceptable (yes or no). No sampling: the answer is read from the next-token
probabilities of the two answer words after the prompt, one forward pass per question, batched, so a verdict is
deterministic.

A question goes through the model's chat template as one user turn with the generation prompt; a model without a
template gets the question as text followed by a newline. The two answer words are compared alone: P(A) is
softmax over the logits of the first token of "A" and of "B" (their other tokens are not read).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from trainer.formats.chat import has_chat_template
from trainer.modeling.models import ModelLoadError, load_reference, load_tokenizer

COMPARE_WORDS = ("A", "B")
ACCEPT_WORDS = ("yes", "no")
# the longest a response is shown to the judge, in tokens: two of them and the prompt fit a small model's context
RESPONSE_TOKENS = 384
PROMPT_TOKENS = 384
# questions per forward pass: the suggestions job's and the bench's
BATCH_SIZE = 8


@dataclass(frozen=True)
class Comparison:
    prompt: str
    first: str
    second: str


def comparison_question(guidelines: str, comparison: Comparison) -> str:
    """The question a judge answers with A or B."""
    rules = f"Guidelines:\n{guidelines.strip()}\n\n" if guidelines.strip() else ""
    return (f"You judge two responses to a prompt. {rules}Prompt:\n{comparison.prompt}\n\n"
            f"Response A:\n{comparison.first}\n\nResponse B:\n{comparison.second}\n\n"
            "Which response is better? Answer with one letter, A or B.")


def acceptance_question(guidelines: str, prompt: str, response: str) -> str:
    """The question a judge answers with yes or no."""
    rules = f"Guidelines:\n{guidelines.strip()}\n\n" if guidelines.strip() else ""
    return (f"You judge a response to a prompt. {rules}Prompt:\n{prompt}\n\nResponse:\n{response}\n\n"
            "Is the response acceptable? Answer with one word, yes or no.")


def question_ids(tokenizer: PreTrainedTokenizerBase, question: str) -> list[int]:
    """The ids the judge reads before its answer word."""
    if has_chat_template(tokenizer):
        text = tokenizer.apply_chat_template([{"role": "user", "content": question}], tokenize=False,
                                             add_generation_prompt=True)
        return list(tokenizer(text, add_special_tokens=False)["input_ids"])
    return list(tokenizer(question + "\n")["input_ids"])


def answer_token_ids(tokenizer: PreTrainedTokenizerBase, words: Sequence[str]) -> list[int]:
    """The first token of each answer word; a ModelLoadError if two words begin with the same token."""
    ids = [tokenizer(word, add_special_tokens=False)["input_ids"][0] for word in words]
    if len(set(ids)) < len(ids):
        raise ModelLoadError(f"the judge's tokenizer begins {', '.join(map(repr, words))} with the same token")
    return ids


def left_padded(batch: Sequence[Sequence[int]], pad_token_id: int,
                device: torch.device | None = None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """input_ids, attention_mask and position_ids of sequences padded on the left, positions counted from each
    sequence's first token (a forward pass without generate() does not derive them from the mask)."""
    longest = max(len(ids) for ids in batch)
    input_ids = torch.tensor([[pad_token_id] * (longest - len(ids)) + list(ids) for ids in batch], device=device)
    mask = torch.tensor([[0] * (longest - len(ids)) + [1] * len(ids) for ids in batch], device=device)
    return input_ids, mask, (mask.cumsum(dim=-1) - 1).clamp(min=0)


class Judge:
    """A frozen instruct model that answers judge questions with probabilities."""

    def __init__(self, path: str, *, batch_size: int = BATCH_SIZE) -> None:
        self.tokenizer = load_tokenizer(path)
        self.model: PreTrainedModel = load_reference(path)
        self.batch_size = batch_size

    def _shortened(self, text: str, limit: int) -> str:
        ids = self.tokenizer(text, add_special_tokens=False)["input_ids"]
        return text if len(ids) <= limit else self.tokenizer.decode(ids[:limit]) + " [...]"

    def first_word_probabilities(self, questions: Sequence[str], words: Sequence[str]) -> list[float]:
        """P(the first word) against the second after each question, in the order given."""
        choices = torch.tensor(answer_token_ids(self.tokenizer, words), device=self.model.device)
        encoded = [question_ids(self.tokenizer, question) for question in questions]
        probabilities: list[float] = []
        with torch.no_grad():
            for start in range(0, len(encoded), self.batch_size):
                logits = self._last_logits(encoded[start : start + self.batch_size])
                pair = logits[:, choices].float()
                probabilities.extend(torch.softmax(pair, dim=-1)[:, 0].tolist())
        return probabilities

    def _last_logits(self, batch: list[list[int]]) -> torch.Tensor:
        """The logits after each sequence's last token."""
        input_ids, mask, positions = left_padded(batch, self.tokenizer.pad_token_id, self.model.device)
        output = self.model(input_ids=input_ids, attention_mask=mask, position_ids=positions, use_cache=False)
        return output.logits[:, -1, :]

    def prefer_first(self, guidelines: str, comparisons: Sequence[Comparison]) -> list[float]:
        """P(the response shown as A is better) for each comparison, in the order shown."""
        questions = [comparison_question(guidelines, Comparison(
            self._shortened(c.prompt, PROMPT_TOKENS), self._shortened(c.first, RESPONSE_TOKENS),
            self._shortened(c.second, RESPONSE_TOKENS))) for c in comparisons]
        return self.first_word_probabilities(questions, COMPARE_WORDS)

    def acceptable(self, guidelines: str, prompts: Sequence[str], responses: Sequence[str]) -> list[float]:
        """P(yes) that each response is acceptable for its prompt."""
        questions = [acceptance_question(guidelines, self._shortened(p, PROMPT_TOKENS),
                                         self._shortened(r, RESPONSE_TOKENS))
                     for p, r in zip(prompts, responses, strict=True)]
        return self.first_word_probabilities(questions, ACCEPT_WORDS)
