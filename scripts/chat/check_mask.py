#!/usr/bin/env python3
"""Checks Headroom's chat rendering and scored-token mask against transformers.

Renders conversations (system, user and assistant turns, several turns, prompt/completion pairs
in both of TRL's forms) with transformers' apply_chat_template(..., tokenize=True,
return_dict=True, return_assistant_tokens_mask=True) on SmolLM2-Instruct's template with
{% generation %} blocks added around the assistant's content and its <|im_end|> (transformers
needs the blocks), and compares the ids and the mask with `headroom prepare --chat --show`:
once with the model's own template (no blocks: Headroom finds the assistant's turns by
rendering the conversation's beginnings) and once with the tagged template.

    python scripts/chat/check_mask.py --model DIR [--headroom target/release/headroom]
    python scripts/chat/check_mask.py --fixture trainer/tests/data/chat_masks.json \
        --model nn/tests/data/tiny-smollm2 --template-from nn/tests/data/gguf/tiny-smollm2.gguf

DIR is a Hugging Face directory of SmolLM2-135M-Instruct (tokenizer.json and its chat
template). With --fixture, writes the conversations and transformers' ids and masks for the
given tokenizer to the file that `cargo test` compares with (no Headroom run).
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

CONVERSATIONS = [
    {"messages": [
        {"role": "user", "content": "What is 2 + 2?"},
        {"role": "assistant", "content": "2 + 2 = 4."},
    ]},
    {"messages": [
        {"role": "system", "content": "You answer in one word."},
        {"role": "user", "content": "Colour of the sky?"},
        {"role": "assistant", "content": "Blue."},
        {"role": "user", "content": "And grass?"},
        {"role": "assistant", "content": "Green."},
    ]},
    {"messages": [
        {"role": "user", "content": "Write a haiku about rust."},
        {"role": "assistant", "content": "Iron turns to red\nslowly, as the rain insists—\nbrittle, patient bloom."},
        {"role": "user", "content": "Thanks! Now in French, s'il vous plaît."},
        {"role": "assistant", "content": "  Le fer rougit, lent;\nla pluie insiste, têtue.\n"},
    ]},
    {"prompt": "def add(a, b):\n    \"\"\"Return the sum.\"\"\"", "completion": "    return a + b\n"},
    {"prompt": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}],
     "completion": [{"role": "assistant", "content": "Hello!"}]},
    {"messages": [
        {"role": "user", "content": ""},
        {"role": "assistant", "content": ""},
    ]},
]

# SmolLM2-Instruct's line for each message, and the same for the assistant with its content
# and <|im_end|> in a generation block.
PLAIN = "{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}"
TAGGED = (
    "{% if message['role'] == 'assistant' %}{{ '<|im_start|>assistant\n' }}"
    "{% generation %}{{ message['content'] + '<|im_end|>' }}{% endgeneration %}{{ '\n' }}"
    "{% else %}" + PLAIN + "{% endif %}"
)


def messages_of(line):
    """The messages a line stands for, as Headroom reads it."""
    if "messages" in line:
        return line["messages"]
    prompt, completion = line["prompt"], line["completion"]
    prompt = [{"role": "user", "content": prompt}] if isinstance(prompt, str) else prompt
    completion = (
        [{"role": "assistant", "content": completion}] if isinstance(completion, str) else completion
    )
    return prompt + completion


def load_template(model, template_from):
    """The chat template: from a GGUF file's metadata, or the model directory's."""
    if template_from:
        from gguf import GGUFReader

        field = GGUFReader(template_from).fields["tokenizer.chat_template"]
        return field.contents()
    jinja = os.path.join(model, "chat_template.jinja")
    if os.path.exists(jinja):
        return open(jinja, encoding="utf-8").read()
    return json.load(open(os.path.join(model, "tokenizer_config.json")))["chat_template"]


def transformers_masks(model, template, tagged):
    from transformers import PreTrainedTokenizerFast

    tokenizer = PreTrainedTokenizerFast(tokenizer_file=os.path.join(model, "tokenizer.json"))
    expected = []
    for line in CONVERSATIONS:
        messages = messages_of(line)
        plain = tokenizer.apply_chat_template(messages, chat_template=template, tokenize=False)
        tagged_text = tokenizer.apply_chat_template(messages, chat_template=tagged, tokenize=False)
        assert plain == tagged_text, "the tagged template renders other text"
        out = tokenizer.apply_chat_template(
            messages,
            chat_template=tagged,
            tokenize=True,
            return_dict=True,
            return_assistant_tokens_mask=True,
        )
        expected.append({"text": plain, "ids": list(out["input_ids"]),
                         "mask": list(out["assistant_masks"])})
    return expected


def headroom_masks(headroom, model, jsonl, template_file=None):
    command = [headroom, "prepare", "--chat", jsonl, "--tokenizer", model,
               "--show", str(len(CONVERSATIONS))]
    if template_file:
        command += ["--chat-template", template_file]
    out = subprocess.run(command, check=True, capture_output=True, text=True).stdout
    return [json.loads(line) for line in out.splitlines()]


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", required=True)
    parser.add_argument("--headroom", default="target/release/headroom")
    parser.add_argument("--template-from", help="a GGUF file whose chat template to use")
    parser.add_argument("--fixture", help="write the expected ids and masks here and stop")
    args = parser.parse_args()
    template = load_template(args.model, args.template_from)
    assert PLAIN in template, "not SmolLM2-Instruct's template"
    tagged = template.replace(PLAIN, TAGGED)
    expected = transformers_masks(args.model, template, tagged)
    if args.fixture:
        fixture = {"conversations": CONVERSATIONS, "expected": expected}
        with open(args.fixture, "w", encoding="utf-8") as f:
            json.dump(fixture, f, ensure_ascii=False, indent=1)
            f.write("\n")
        print(f"wrote {len(expected)} conversations to {args.fixture}")
        return 0
    failures = 0
    with tempfile.TemporaryDirectory() as tmp:
        jsonl = os.path.join(tmp, "chats.jsonl")
        with open(jsonl, "w", encoding="utf-8") as f:
            for line in CONVERSATIONS:
                f.write(json.dumps(line, ensure_ascii=False) + "\n")
        tagged_file = os.path.join(tmp, "tagged.jinja")
        with open(tagged_file, "w", encoding="utf-8") as f:
            f.write(tagged)
        for name, template_file in [("model's template (prefixes)", None),
                                    ("tagged template ({% generation %})", tagged_file)]:
            ours = headroom_masks(args.headroom, args.model, jsonl, template_file)
            for at, (want, got) in enumerate(zip(expected, ours)):
                same = (want["ids"], want["mask"]) == (got["ids"], got["mask"])
                scored = sum(want["mask"])
                print(f"{name}, conversation {at}: {len(want['ids'])} tokens, {scored} scored: "
                      f"{'same' if same else 'DIFFERENT'}")
                if not same:
                    failures += 1
                    print(f"  transformers: {want['ids']}\n  {want['mask']}")
                    print(f"  headroom:     {got['ids']}\n  {got['mask']}")
            if len(ours) != len(expected):
                failures += 1
                print(f"{name}: {len(ours)} conversations shown, {len(expected)} expected")
    print("all equal" if failures == 0 else f"{failures} differ")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
