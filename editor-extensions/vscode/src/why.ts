// The "why this suggestion" view: what the prompt of a document's last decoded completion
// showed (completer/prompt's answer), as markdown. Pure: the extension feeds it the answer.
// The Neovim plugin's lua/completer/why.lua writes the same lines.
import type { PromptAnswer } from "./protocol";

// A fence longer than any run of backticks in the prompt, so that none of them closes it.
export function fenceFor(text: string): string {
  const longest = Math.max(0, ...Array.from(text.matchAll(/`+/g), (run) => run[0].length));
  return "`".repeat(Math.max(3, longest + 1));
}

// `document`: the completed file's path as the user knows it (relative to the workspace).
export function whyView(document: string, answer: PromptAnswer): string {
  const sections = answer.sections.map((section) => `- ${section.path} — ${section.why}`);
  const fence = fenceFor(answer.prompt);
  return [
    `# Why this suggestion: ${document}`,
    "",
    sections.length
      ? "The other files the prompt of its last completion showed, in the prompt's order, and why:"
      : "The prompt of its last completion showed no other file.",
    "",
    ...(sections.length ? [...sections, ""] : []),
    "## The prompt, as the model read it",
    "",
    fence,
    answer.prompt,
    fence,
    "",
  ].join("\n");
}
