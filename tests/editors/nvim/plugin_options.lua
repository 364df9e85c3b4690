-- Run by tests/editors/test_nvim_plugin.py with `nvim --clean --headless -l`: the plugin's
-- defaults as Neovim sees them (each option's dotted name and vim.inspect of its value),
-- and whether doc/completer.txt's tags build and every option's tag opens its help.
-- No server is started. Writes JSON to $RESULT.
local plugin = os.getenv("PLUGIN")
vim.opt.runtimepath:prepend(plugin)

local result = { defaults = {}, help_errors = {} }

local function flatten(prefix, options)
  for name, value in pairs(options) do
    if name == "keymaps" then
      flatten(prefix .. name .. ".", value)
    else
      result.defaults[prefix .. name] = vim.inspect(value)
    end
  end
end
flatten("", require("completer").defaults)

-- helptags writes a tags file next to the doc: build it in a copy.
local doc = vim.fs.joinpath(os.getenv("WORKSPACE"), "runtime", "doc")
vim.fn.mkdir(doc, "p")
local text = vim.fn.readfile(vim.fs.joinpath(plugin, "doc", "completer.txt"))
vim.fn.writefile(text, vim.fs.joinpath(doc, "completer.txt"))
local ok, err = pcall(vim.cmd.helptags, doc)
if not ok then
  table.insert(result.help_errors, "helptags: " .. tostring(err))
end
vim.opt.runtimepath:prepend(vim.fs.dirname(doc))
local tags = { "completer", "completer-options", ":CompleterStats", ":CompleterToggle", "completer.statusline()",
  "completer.setup()", "CompleterGhost" }
for name in pairs(result.defaults) do
  tags[#tags + 1] = "completer-" .. name
end
for _, tag in ipairs(tags) do
  local opened, message = pcall(vim.cmd.help, tag)
  if not opened then
    table.insert(result.help_errors, tag .. ": " .. tostring(message))
  end
end

-- setup() with bad options: they are named in one warning and the defaults kept.
result.notifications = {}
vim.notify = function(message, level)
  table.insert(result.notifications, { message = message, level = level })
end
local completer = require("completer")
completer.setup({ bogus = 1, debounce_ms = "fast", keymaps = { accept = false, nope = "x" },
                  cmd = { "completer-no-such-program" } })
result.config = { debounce_ms = completer.config.debounce_ms, accept = completer.config.keymaps.accept,
                  accept_line = completer.config.keymaps.accept_line }

local file = assert(io.open(os.getenv("RESULT"), "w"))
file:write(vim.json.encode(result))
file:close()
