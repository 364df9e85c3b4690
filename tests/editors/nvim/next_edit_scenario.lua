-- The next-edit scenario of tests/editors/nvim/plugin_next_edit.lua and next_edit_screen_user.lua:
-- the text of tests/lsp/test_lsp_next_edit.py, where the user renames a parameter at its
-- definition, setup() with the server's options for it, and the extmarks the plugin draws
-- a next edit with, as JSON.
local S = {}

S.TEXT = {
  "import math",
  "",
  "",
  "def area(width, height):",
  "    return width * height",
  "",
  "",
  "def perimeter(width, height):",
  "    return 2 * (width + height)",
}
S.CURSOR = { 4, 9 } -- on the parameter to rename

--- shapes.py in the workspace with TEXT, the cursor on the parameter; returns the buffer.
function S.open()
  vim.cmd.edit(vim.fs.joinpath(os.getenv("WORKSPACE"), "shapes.py"))
  vim.api.nvim_buf_set_lines(0, 0, -1, false, S.TEXT)
  vim.api.nvim_win_set_cursor(0, S.CURSOR)
  return vim.api.nvim_get_current_buf()
end

function S.setup()
  require("completer").setup({
    cmd = { os.getenv("COMPLETER"), "serve", "--stdio" },
    -- A small region (as tests/lsp/test_lsp_next_edit.py), and the target decoding alone:
    -- speculation's verify batches flip near ties by the machine's timing, and the smol
    -- model's answer here is the same run after run only without them.
    init_options = {
      models = { preset = "smol" },
      generation = { max_tokens = 16, time_budget_ms = 0, draft_mode = "target" },
      edits = { lines_above = 3, lines_below = 3, context_lines = 2 },
    },
  })
end

--- Wait (with the harness `H`) until the server has evaluated the prompt at the cursor
--- ahead of a request (completer/warm, sent as the buffer was opened). It gives way to
--- requests, and where it stopped changes the batches the model later evaluates its
--- prompts in: enough, at the smol model's near ties, to change its answer.
function S.wait_warmed(H, client)
  H.wait(function()
    local _, stats = H.request(client, "completer/stats")
    return stats.warmed_tokens > 0
  end, 60000, "the prompt at the cursor to be warmed")
end

--- The next edit's extmarks in `buf`, flattened for JSON (harness `H`).
function S.marks(H, buf)
  return H.marks(buf, "completer.next_edit")
end

return S
