-- Shared by the tests/editors/nvim/plugin_*.lua scripts that tests/editors/test_nvim_plugin.py runs with
-- `nvim --clean --headless -S <script>`. A test is a coroutine in Neovim's main loop,
-- not a `-l` script: keys sent with nvim_input are then typed for real, in Insert mode,
-- with TextChangedI and CursorMovedI firing as they do for a user (a `-l` script never
-- reaches the main loop, and feedkeys(..., 'x') fires neither). The test yields while it
-- waits, so the LSP client, timers and typed keys all run.
--
-- Environment: RESULT (JSON written there at the end), PLUGIN (editor-extensions/nvim),
-- WORKSPACE (a folder for files), COMPLETER (the server executable), TIMEOUT_MS.
local H = {}

vim.opt.runtimepath:prepend(os.getenv("PLUGIN"))

H.result = { checks = {}, notifications = {}, section_errors = vim.empty_dict() }
local finished = false

--- Every vim.notify call, kept in order; nothing is shown.
vim.notify = function(message, level)
  table.insert(H.result.notifications, { message = message, level = level or vim.log.levels.INFO })
end

function H.finish()
  if finished then
    return
  end
  finished = true
  H.result.errmsg = vim.v.errmsg
  H.result.messages = vim.fn.execute("messages")
  local file = assert(io.open(os.getenv("RESULT"), "w"))
  file:write(vim.json.encode(H.result))
  file:close()
  vim.cmd("qall!")
end

--- Record a named value for the Python side to assert on.
function H.check(name, value)
  H.result.checks[name] = value == nil and vim.NIL or value
end

local co
local function resume()
  local ok, err = coroutine.resume(co)
  if not ok then
    H.result.error = debug.traceback(co, tostring(err))
    H.finish()
  elseif coroutine.status(co) == "dead" then
    H.finish()
  end
end

function H.sleep(ms)
  vim.defer_fn(resume, ms)
  coroutine.yield()
end

--- Wait until `condition()` is truthy (and return its value), polling every 10 ms;
--- raise an error naming `what` after `timeout_ms`.
function H.wait(condition, timeout_ms, what)
  local deadline = vim.uv.now() + (timeout_ms or 10000)
  while true do
    local value = condition()
    if value then
      return value
    end
    if vim.uv.now() > deadline then
      error("timed out waiting for " .. (what or "a condition"), 2)
    end
    H.sleep(10)
  end
end

--- Type `keys` (key notation) as the user would, and let Neovim process them.
function H.type(keys)
  vim.api.nvim_input(keys)
  H.sleep(30)
end

--- Type `keys` and wait until they change the lines of `buf` (an error naming `keys` after
--- 5 s); returns the new lines.
function H.type_changing(buf, keys)
  local before = H.lines(buf)
  H.type(keys)
  return H.wait(function()
    local lines = H.lines(buf)
    return not vim.deep_equal(lines, before) and lines
  end, 5000, keys)
end

--- Escape text for nvim_input, which reads "<" as the start of a key name.
function H.literal(text)
  return (text:gsub("<", "<lt>"))
end

--- Run `fn` as the section `name`: an error is recorded under that name (for the
--- Python test of that behaviour to report) and the script goes on with the next
--- section; either way, it ends in Normal mode. (LuaJIT can yield across xpcall.)
function H.section(name, fn)
  local ok, err = xpcall(fn, debug.traceback)
  if not ok then
    H.result.section_errors[name] = err
  end
  if vim.api.nvim_get_mode().mode ~= "n" then
    H.type("<Esc>")
  end
end

--- An LSP request from inside the test: waits for the answer.
function H.request(client, method, params)
  local answer
  client:request(method, params or vim.empty_dict(), function(err, result)
    answer = { err = err, result = result }
  end)
  H.wait(function()
    return answer
  end, 60000, method)
  return answer.err, answer.result
end

function H.client()
  return vim.lsp.get_clients({ name = "completer" })[1]
end

--- Wrap `client.request` so that the server's answers reach the test before the plugin's
--- handler gets them, for the Python side to compute what the plugin should have done from
--- what the server sent, not from what the plugin drew: each inlineCompletion answer's items
--- go to `on_items(items, asked)` (`asked`: { buf, position, line = the text of the line
--- asked at, when it was asked }), and each copilotInlineEdit answer's edits are appended to
--- `edits` (vim.NIL for an answer without them).
function H.capture(client, on_items, edits)
  local request = client.request
  client.request = function(self, method, params, handler, bufnr)
    local plugin_handler = handler
    if method == "textDocument/inlineCompletion" then
      local position = params.position
      local asked = { buf = bufnr, position = position,
                      line = vim.api.nvim_buf_get_lines(bufnr, position.line, position.line + 1, false)[1] }
      handler = function(err, result, ...)
        on_items(type(result) == "table" and (result.items or result) or {}, asked)
        return plugin_handler(err, result, ...)
      end
    elseif method == "textDocument/copilotInlineEdit" then
      handler = function(err, result, ...)
        edits[#edits + 1] = type(result) == "table" and result.edits or vim.NIL
        return plugin_handler(err, result, ...)
      end
    end
    return request(self, method, params, handler, bufnr)
  end
end

--- Wait until the server's models are loaded; returns the client.
function H.wait_ready()
  local client = H.wait(H.client, 30000, "the completer client")
  H.wait(function()
    return client.initialized
  end, 30000, "initialize")
  H.wait(function()
    local _, stats = H.request(client, "completer/stats")
    return stats and (stats.ready or stats.error ~= "")
  end, 180000, "the models to load")
  return client
end

-- An extmark's virtual text chunks ({ text, highlight } each) as one string.
local function chunks_text(chunks)
  local parts = {}
  for _, chunk in ipairs(chunks) do
    parts[#parts + 1] = chunk[1]
  end
  return table.concat(parts)
end

--- The ghost text shown in `buf`: { row, col, text } (virt_text and virt_lines joined
--- with newlines), or nil.
function H.ghost(buf)
  local ns = vim.api.nvim_get_namespaces()["completer"]
  local marks = ns and vim.api.nvim_buf_get_extmarks(buf or 0, ns, 0, -1, { details = true }) or {}
  if #marks == 0 then
    return nil
  end
  local id, row, col, details = unpack(marks[1])
  local lines = { chunks_text(details.virt_text or {}) }
  for _, virt_line in ipairs(details.virt_lines or {}) do
    lines[#lines + 1] = chunks_text(virt_line)
  end
  return { id = id, row = row, col = col, text = table.concat(lines, "\n"), count = #marks,
           pos = details.virt_text_pos }
end

--- The extmarks of `namespace` in `buf`, flattened for JSON.
function H.marks(buf, namespace)
  local ns = vim.api.nvim_get_namespaces()[namespace]
  local found = {}
  for _, mark in ipairs(ns and vim.api.nvim_buf_get_extmarks(buf, ns, 0, -1, { details = true }) or {}) do
    local _, row, col, details = unpack(mark)
    local virt_lines = {}
    for _, line in ipairs(details.virt_lines or {}) do
      virt_lines[#virt_lines + 1] = chunks_text(line)
    end
    found[#found + 1] = {
      row = row, col = col, end_row = details.end_row or vim.NIL, end_col = details.end_col or vim.NIL,
      hl_group = details.hl_group or vim.NIL,
      virt_text = details.virt_text and chunks_text(details.virt_text) or vim.NIL,
      virt_text_pos = details.virt_text_pos or vim.NIL,
      virt_lines = details.virt_lines and virt_lines or vim.NIL,
      virt_lines_above = details.virt_lines_above or false,
    }
  end
  return found
end

--- The Python the ghost-text tests type into (stats.py), as buffer lines.
H.STATS = {
  "import math",
  "",
  "",
  "def mean(values):",
  "    return sum(values) / len(values)",
  "",
  "",
  "def variance(values):",
  "    m = mean(values)",
  "    return sum((x - m) ** 2 for x in values) / len(values)",
  "",
  "",
}

function H.lines(buf)
  return vim.api.nvim_buf_get_lines(buf or 0, 0, -1, false)
end

--- The path of the file `name` in the test's WORKSPACE folder.
function H.path_of(name)
  return vim.fs.joinpath(os.getenv("WORKSPACE"), name)
end

--- The bytes of the file `name` in WORKSPACE, as they are on disk.
function H.read(name)
  local file = assert(io.open(H.path_of(name), "rb"))
  local bytes = file:read("*a")
  file:close()
  return bytes
end

--- The user's own Normal-mode <Tab> (jumplist forward, or a mapping of theirs), mapped
--- before the plugin's setup(): it counts its presses in vim.g.user_tab.
function H.map_user_tab()
  vim.g.user_tab = 0
  vim.keymap.set("n", "<Tab>", function()
    vim.g.user_tab = vim.g.user_tab + 1
  end)
end

--- Run `main` as the test, with a watchdog of TIMEOUT_MS.
function H.run(main)
  vim.defer_fn(function()
    H.result.error = "timed out after " .. os.getenv("TIMEOUT_MS") .. " ms"
    H.finish()
  end, tonumber(os.getenv("TIMEOUT_MS") or "120000"))
  co = coroutine.create(main)
  vim.schedule(resume)
end

return H
