-- The next-edit scenario of tests/nvim/plugin_next_edit.lua and next_edit_screen_user.lua:
-- the text of tests/test_lsp_next_edit.py, where the user renames a parameter at its
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
    -- A small region (as tests/test_lsp_next_edit.py), and the target decoding alone:
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

--- The next edit's extmarks in `buf`, flattened for JSON.
function S.marks(buf)
  local ns = vim.api.nvim_get_namespaces()["completer.next_edit"]
  local found = {}
  for _, mark in ipairs(ns and vim.api.nvim_buf_get_extmarks(buf, ns, 0, -1, { details = true }) or {}) do
    local _, row, col, details = unpack(mark)
    local virt_text = {}
    for _, chunk in ipairs(details.virt_text or {}) do
      virt_text[#virt_text + 1] = chunk[1]
    end
    local virt_lines = {}
    for _, line in ipairs(details.virt_lines or {}) do
      local parts = {}
      for _, chunk in ipairs(line) do
        parts[#parts + 1] = chunk[1]
      end
      virt_lines[#virt_lines + 1] = table.concat(parts)
    end
    found[#found + 1] = {
      row = row, col = col, end_row = details.end_row or vim.NIL, end_col = details.end_col or vim.NIL,
      hl_group = details.hl_group or vim.NIL,
      virt_text = details.virt_text and table.concat(virt_text) or vim.NIL,
      virt_text_pos = details.virt_text_pos or vim.NIL,
      virt_lines = details.virt_lines and virt_lines or vim.NIL,
      virt_lines_above = details.virt_lines_above or false,
    }
  end
  return found
end

return S
