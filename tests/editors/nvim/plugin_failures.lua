-- Run by tests/editors/test_nvim_plugin.py: the plugin when the server cannot help.
--   FAILURE=no_server   cmd is a program that does not exist
--   FAILURE=bad_model   the server starts, but its target model file does not exist
-- Either way the user is told once, and typing goes on with no error.
local H = dofile(vim.fs.joinpath(vim.fs.dirname(debug.getinfo(1, "S").source:sub(2)), "harness.lua"))

local failure = os.getenv("FAILURE")

--- Type a few lines in Insert mode, with pauses longer than the debounce, as a user
--- would while the failure is there. Returns the buffer's lines.
local function type_some(buf)
  H.type("ohello")
  H.sleep(300)
  H.type("<Tab>world")
  H.sleep(300)
  H.type("<CR>more<Esc>")
  H.wait(function()
    return vim.api.nvim_get_mode().mode == "n" and vim.trim(H.lines(buf)[#H.lines(buf)]) == "more"
  end, 5000, "the typing")
  return H.lines(buf)
end

H.run(function()
  local completer = require("completer")
  local options = {
    cmd = { os.getenv("COMPLETER"), "serve", "--stdio" },
    init_options = { models = { preset = "smol" }, generation = { max_tokens = 16, time_budget_ms = 0 } },
    stats_interval_ms = 200,
  }
  if failure == "no_server" then
    options.cmd = { "completer-no-such-program", "serve", "--stdio" }
  else
    -- A model file is machine-level: the server takes it as a flag only (:help completer-machine).
    vim.list_extend(options.cmd, { "--target", vim.fs.joinpath(os.getenv("WORKSPACE"), "missing.gguf") })
  end
  completer.setup(options)
  vim.cmd.edit(vim.fs.joinpath(os.getenv("WORKSPACE"), "stats.py"))
  local buf = vim.api.nvim_get_current_buf()
  vim.api.nvim_buf_set_lines(buf, 0, -1, false, { "def mean(values):" })

  if failure == "bad_model" then
    local client = H.wait(H.client, 30000, "the client")
    H.wait(function()
      return completer.statusline() == "completer: error"
    end, 60000, "the statusline to show the error")
    local _, stats = H.request(client, "completer/stats")
    H.check("stats_error", stats.error)
  else
    H.sleep(500) -- room for anything that would start
  end
  H.check("lines", type_some(buf))
  H.sleep(1000)
  H.check("statusline", completer.statusline())
  H.check("clients", #vim.lsp.get_clients({ name = "completer" }))
end)
