"""Rows and texts: JSONL, TRL's record formats and chat templates, final answers, and training rows checked,
tokenised and collated. Torch-free at import but for data.py: the web reads uploads and formats prompts with
them."""
