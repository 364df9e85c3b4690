-- Run by tests/editors/test_neovim.py in a headless Neovim: start completer's server with
-- vim.lsp.start, open a Python buffer, ask for textDocument/inlineCompletion at the
-- end of its last line (which holds CJK and an emoji: Neovim counts UTF-8 bytes), write what came back as JSON to $RESULT, and quit.
local result_path = os.getenv("RESULT")
local function finish(value)
  local file = assert(io.open(result_path, "w"))
  file:write(vim.json.encode(value))
  file:close()
  vim.cmd("qall!")
end

local lines = {
  "def mean(values):",
  "    return sum(values) / len(values)",
  "",
  "",
  "def variance(values):",
  '    label = "平均 😀"; center = mean(',
}
vim.cmd.edit(os.getenv("WORKSPACE") .. "/stats.py")
vim.api.nvim_buf_set_lines(0, 0, -1, false, lines)

local client_id = vim.lsp.start({
  name = "completer",
  cmd = { os.getenv("COMPLETER"), "serve", "--stdio" },
  root_dir = os.getenv("WORKSPACE"),
  init_options = { models = { preset = "smol" }, generation = { max_tokens = 16, time_budget_ms = 0 } },
})
local client = vim.lsp.get_client_by_id(client_id)

local ready = vim.wait(120000, function()
  local response = client:request_sync("completer/stats", vim.empty_dict(), 2000, 0)
  return response ~= nil and response.result ~= nil and response.result.ready
end, 200)
if not ready then
  return finish({ error = "the models did not load" })
end

local row = #lines - 1
local params = {
  textDocument = { uri = vim.uri_from_bufnr(0) },
  position = { line = row, character = #lines[#lines] },
  context = { triggerKind = 1 },
}
local response = client:request_sync("textDocument/inlineCompletion", params, 60000, 0)
finish({
  encoding = client.offset_encoding,
  inline_provider = client.server_capabilities.inlineCompletionProvider ~= nil,
  response = response,
})
