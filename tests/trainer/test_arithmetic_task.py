from trainer.builtin_datasets import arithmetic


def test_the_seed_example_is_solved_with_precedence():
    problem = arithmetic.solve("2 + 2 * 6")
    assert problem.answer == 14
    assert problem.prompt == "Calculate 2 + 2 * 6\n"
    assert problem.completion == "<think>2 * 6 = 12; 2 + 12 = 14</think><answer>14</answer>"
    assert arithmetic.solve("7 - 3 * 2 * 2 + 1").answer == 7 - 3 * 2 * 2 + 1


def test_split_is_a_function_of_the_text_and_never_overlaps():
    for level, count in ((1, None), (2, 200), (3, 200)):
        train = {p.expression for p in arithmetic.problems(level, "train", count)}
        test = {p.expression for p in arithmetic.problems(level, "test", count)}
        assert train and test and not train & test
        assert all(arithmetic.split_of(e) == "train" for e in train)
    assert len(arithmetic.problems(1, "train")) + len(arithmetic.problems(1, "test")) == 100
    assert arithmetic.problems(2, "test", 50, seed=3) == arithmetic.problems(2, "test", 50, seed=3)


def test_levels_grow_in_difficulty():
    assert all(len(p.steps) == 1 for p in arithmetic.problems(1, "train"))
    assert all(len(p.steps) == 2 for p in arithmetic.problems(2, "train", 50))
    assert all(len(p.steps) == 3 for p in arithmetic.problems(3, "train", 50))


def test_checker_and_preference_pairs():
    rows = arithmetic.preference_rows(2, "train", 100, pairs_per_problem=2)
    assert len(rows) == 200
    for row in rows:
        assert arithmetic.is_correct(row["chosen"], row["answer"])
        assert not arithmetic.is_correct(row["rejected"], row["answer"])
        assert row["rejected"].startswith("<think>") and row["rejected"].endswith("</answer>")
    assert arithmetic.is_correct("<answer>14.0</answer>", 14)
    assert not arithmetic.is_correct("<think>2 + 12 = 14</think> the answer is 14", 14)  # no answer tag


def test_tiny_model_loads_through_auto_classes(tiny_model):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(tiny_model)
    model = AutoModelForCausalLM.from_pretrained(tiny_model)
    ids = tokenizer("Calculate 12 + 3\n<think>")["input_ids"]
    assert ids[0] == tokenizer.bos_token_id
    assert tokenizer.decode(ids, skip_special_tokens=True) == "Calculate 12 + 3\n<think>"
    assert "1" in tokenizer.convert_ids_to_tokens(ids) and "2" in tokenizer.convert_ids_to_tokens(ids)
    assert model.config.num_hidden_layers == 2 and model.config.vocab_size == len(tokenizer)
