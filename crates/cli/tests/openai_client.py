"""The official `openai` Python client against `servetune sim` (URL as argv[1])."""
import sys

import openai

url = sys.argv[1]
c = openai.OpenAI(base_url=url + "/v1", api_key="unused", max_retries=0)
model = c.models.list().data[0].id

text, usage = "", None
for ch in c.completions.create(model=model, prompt="hello there world", max_tokens=8, stream=True,
                               stream_options={"include_usage": True}, extra_body={"ignore_eos": True}):
    if ch.choices:
        text += ch.choices[0].text or ""
    if ch.usage:
        usage = ch.usage
assert usage is not None and usage.completion_tokens == 8 and usage.prompt_tokens == 3, usage
assert len(text.split()) == 8, text

content, roles, usage = "", 0, None
for ch in c.chat.completions.create(model=model, messages=[{"role": "user", "content": "hi there"}], max_tokens=6,
                                    stream=True, stream_options={"include_usage": True}, extra_body={"ignore_eos": True}):
    if ch.choices:
        d = ch.choices[0].delta
        roles += 1 if d.role == "assistant" else 0
        content += d.content or ""
    if ch.usage:
        usage = ch.usage
assert roles == 1 and usage.completion_tokens == 6 and len(content.split()) == 6, (roles, usage, content)

r = c.completions.create(model=model, prompt="a b", max_tokens=3, extra_body={"ignore_eos": True})
assert r.usage.completion_tokens == 3 and r.choices[0].finish_reason == "length", r
r = c.chat.completions.create(model=model, messages=[{"role": "user", "content": "x"}], max_tokens=4, extra_body={"ignore_eos": True})
assert r.choices[0].message.role == "assistant" and r.usage.completion_tokens == 4, r

try:
    c.completions.create(model=model, prompt="a", max_tokens=0)
    raise SystemExit("max_tokens=0 was accepted")
except openai.BadRequestError as e:
    assert "max_tokens" in str(e), e
print("openai client ok")
