import { describe, expect, it } from "vitest";
import type { PromptAnswer } from "../src/protocol";
import { fenceFor, whyView } from "../src/why";

// An answer as the server gives it for tests/shop_repository.py's orders.py.
const answer: PromptAnswer = {
  prompt: "<|fim_prefix|>from shop.client import connect\n    return transport.fetch(\"/orders\", <|fim_suffix|><|fim_middle|>",
  sections: [
    { path: "shop/client.py", why: "connect line 6: called at the cursor" },
    { path: "shop/transport.py", why: "Transport.fetch line 10: same name" },
  ],
};

describe("whyView", () => {
  it("shows a header, each other file as path — why in the prompt's order, then the prompt fenced", () => {
    expect(whyView("shop/orders.py", answer).split("\n")).toEqual([
      "# Why this suggestion: shop/orders.py",
      "",
      "The other files the prompt of its last completion showed, in the prompt's order, and why:",
      "",
      "- shop/client.py — connect line 6: called at the cursor",
      "- shop/transport.py — Transport.fetch line 10: same name",
      "",
      "## The prompt, as the model read it",
      "",
      "```",
      "<|fim_prefix|>from shop.client import connect",
      '    return transport.fetch("/orders", <|fim_suffix|><|fim_middle|>',
      "```",
      "",
    ]);
  });

  it("says when the prompt showed no other file", () => {
    const lines = whyView("notes.py", { prompt: "x = 1\n", sections: [] }).split("\n");
    expect(lines.slice(0, 5)).toEqual([
      "# Why this suggestion: notes.py",
      "",
      "The prompt of its last completion showed no other file.",
      "",
      "## The prompt, as the model read it",
    ]);
    expect(lines.slice(-5)).toEqual(["```", "x = 1", "", "```", ""]); // the prompt's own last line break kept
  });

  it("fences a prompt holding backticks with a longer fence, so that the prompt shows whole", () => {
    const prompt = 'doc = """\n```python\nprint(1)\n```\n"""';
    const lines = whyView("readme.py", { prompt, sections: [] }).split("\n");
    const fences = lines.filter((line) => line === "````");
    expect(fences).toHaveLength(2);
    expect(lines.slice(lines.indexOf("````") + 1, lines.lastIndexOf("````")).join("\n")).toBe(prompt);
  });
});

describe("fenceFor", () => {
  it("is three backticks at least, one more than the longest run in the text", () => {
    expect(fenceFor("no ticks")).toBe("```");
    expect(fenceFor("a `b` c")).toBe("```");
    expect(fenceFor("a ``` b ```` c")).toBe("`````");
  });
});
