"""50 varied prompts for the lossless tests: (kind, prompt, chat?)."""

CODE = [
    "def fibonacci(n):\n    \"\"\"Return the n-th Fibonacci number.\"\"\"\n",
    "def is_palindrome(s: str) -> bool:\n",
    "import os\n\ndef list_python_files(root):\n    \"\"\"Yield every .py file under root.\"\"\"\n",
    "class Stack:\n    def __init__(self):\n",
    "# Sort a list of dicts by the 'age' key\npeople = [{'name': 'a', 'age': 3}]\n",
    "SELECT name, COUNT(*) FROM users\n",
    "function debounce(fn, ms) {\n",
    "#include <stdio.h>\n\nint main(void) {\n",
    "fn main() {\n    let v: Vec<i32> = ",
    "def quicksort(xs):\n    if len(xs) <= 1:\n        return xs\n",
    "from dataclasses import dataclass\n\n@dataclass\nclass Point:\n",
    "async def fetch_all(urls):\n",
    "def parse_csv_line(line):\n    # handle quoted fields\n",
    "<html>\n  <body>\n    <ul>\n",
    "x = {'a': 1, 'b': [1, 2, 3], 'c': {'d': None}}\nprint(",
]
PROSE = [
    "The quick brown fox",
    "Once upon a time, in a small village by the sea,",
    "The three laws of thermodynamics are",
    "Dear team, I am writing to let you know that",
    "In summary, speculative decoding works by",
    "A haiku about autumn:\n",
    "Q: What is the capital of France?\nA:",
    "List three benefits of regular exercise:\n1.",
]
UNICODE = [
    "日本語の文章を書いてください。東京は",
    "中文测试：今天天气很好，我们去",
    "Emoji story: 🐱🐶🦊 went to the 🏖️ and",
    "Ünïcödé àccents: café, naïve, résumé, and",
    "Русский текст: Привет, как",
    "العربية: مرحبا بكم في",
    "Math symbols: ∀x ∈ ℝ, ∃y such that",
    "Mixed: résumé → 履歴書 → 🧾 →",
    "Rare chars: 𝔘𝔫𝔦𝔠𝔬𝔡𝔢 and 𓀀 and",
    "Korean: 안녕하세요, 오늘은",
]
WHITESPACE = [
    "def f():\n\n\n\n        return        1\n\n\n",
    "a\tb\tc\n1\t2\t3\n",
    "    \n    \n    x = 1\n",
    "Trailing spaces here:          ",
    "\n\n\n\nStart after blank lines:",
    "# Title\n\n\n\n\n## Subtitle\n\n",
    "key:     value\nother:   value2\n",
]
CHAT = [
    "Write a Python function that checks whether a number is prime.",
    "Explain what a hash map is in two sentences.",
    "Translate 'good morning' into Japanese, French and German.",
    "Write a haiku about the ocean, with one emoji at the end.",
    "What does the `yield` keyword do in Python?",
    "Give me a regex that matches an email address.",
    "写一个Python函数计算列表的平均值。",
    "Summarise the plot of Romeo and Juliet in one sentence.",
    "Write a bash one-liner that counts lines in all .py files.",
    "List the first five prime numbers as JSON.",
]

PROMPTS = ([("code", p, False) for p in CODE] + [("prose", p, False) for p in PROSE]
           + [("unicode", p, False) for p in UNICODE] + [("whitespace", p, False) for p in WHITESPACE]
           + [("chat", p, True) for p in CHAT])
assert len(PROMPTS) == 50


def _every(kind: str, step: int) -> list:
    return [p for p in PROMPTS if p[0] == kind][::step]


# What every method runs greedily in test_lossless: every unicode and whitespace prompt (where the two
# vocabularies split text differently: byte fallback, multi-byte characters across tokens, runs of spaces
# and tabs) and every third code, every second prose and chat prompt (the ordinary path, which every
# prompt takes).  The seeded and adaptive tests draw from all 50.
GREEDY = _every("code", 3) + _every("prose", 2) + _every("unicode", 1) + _every("whitespace", 1) + _every("chat", 2)
assert len(GREEDY) == 31 and {k for k, _, _ in GREEDY} == {k for k, _, _ in PROMPTS}
