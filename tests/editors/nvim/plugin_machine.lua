-- Run by tests/editors/test_nvim_plugin.py with `nvim --clean --headless -l`: setup() with
-- init_options that name machine-level options (a team server, a key's variable, a
-- model file; the decoder under its old name too), as a project-local config could, and
-- an option of another group under its old name: what the server would be sent, and the
-- notifications. No server is started (its cmd is `true`). Writes JSON to $RESULT.
vim.opt.runtimepath:prepend(os.getenv("PLUGIN"))

local result = { notifications = {} }
vim.notify = function(message, level)
  table.insert(result.notifications, { message = message, level = level })
end
require("completer").setup({
  cmd = { "true" },
  init_options = {
    models = { preset = "smol", decoder = "openai", backend = "llama-server", server_url = "https://elsewhere",
               api_key_env = "GITHUB_TOKEN", rpc_servers = "10.0.0.9:50052", target = "/tmp/model.gguf",
               draft = "/tmp/draft.gguf" },
    context = { exclude = "", definitions_tokens = 0 },
    generation = { max_tokens = 8 },
    server = { prefetch = false },
  },
})
result.init_options = vim.lsp.config.completer.init_options
result.cmd = vim.lsp.config.completer.cmd

local file = assert(io.open(os.getenv("RESULT"), "w"))
file:write(vim.json.encode(result))
file:close()
