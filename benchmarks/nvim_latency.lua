-- Run by benchmarks/editor_latency.py in `nvim --clean --headless -S`: the plugin against
-- the real server, a scripted typing session, and Tab to the next suggestion; times are
-- taken as Neovim sees them. A keystroke's time is vim.on_key's (the key reaching
-- Neovim); the ghost text's is the plugin's nvim_buf_set_extmark in its namespace at the
-- cursor (what the next redraw shows). Uses tests/nvim/harness.lua (HARNESS) for typing
-- in Neovim's main loop.
--
-- Environment: HARNESS, PLUGIN, COMPLETER, WORKSPACE, RESULT, TIMEOUT_MS (the harness's),
-- PREFIX (the file's text before the session), TYPED (the text typed, a character a
-- key), INTERVALS (JSON: ms after each key), PAUSE_MS (after each line typed), HOLES
-- (JSON: documents for Tab to the next suggestion), READ_MS (a suggestion read before
-- Tab), OPTIONS (JSON: the server's init_options).
local H = dofile(os.getenv("HARNESS"))

local typed = os.getenv("TYPED")
local intervals = vim.json.decode(os.getenv("INTERVALS"))
local pause_ms = tonumber(os.getenv("PAUSE_MS"))
local read_ms = tonumber(os.getenv("READ_MS"))
local ns -- the plugin's ghost text namespace, once it exists

-- The ghost text set at (row, col), with its time (ns), in order; `kept`: an update of the
-- one shown (the user typed what it said), not a new suggestion.
local shown = {}
local set_extmark = vim.api.nvim_buf_set_extmark
vim.api.nvim_buf_set_extmark = function(buf, namespace, row, col, opts)
  local id = set_extmark(buf, namespace, row, col, opts)
  if namespace == ns then
    shown[#shown + 1] = { at = vim.uv.hrtime(), row = row, col = col, kept = opts.id ~= nil }
  end
  return id
end

-- Every key's arrival (ns), in order.
local keys = {}
vim.on_key(function()
  keys[#keys + 1] = vim.uv.hrtime()
end)

--- ms from the key that arrived at `since` to the first ghost text at the cursor `at`
--- ({row, col}, 0-based) set after it and before `before` (ns), and whether it was the
--- one shown kept; nil when none came.
local function latency(since, before, at)
  for _, event in ipairs(shown) do
    if event.at >= since and event.at < before and event.row == at[1] and event.col == at[2] then
      return (event.at - since) / 1e6, event.kept
    end
  end
end

local function cursor()
  local row, col = unpack(vim.api.nvim_win_get_cursor(0))
  return { row - 1, col }
end

-- Plain typing: what is typed is the file's own text, indentation included.
local function plain_buffer(buf)
  for _, option in ipairs({ "autoindent", "smartindent", "cindent" }) do
    vim.bo[buf][option] = false
  end
  vim.bo[buf].indentexpr = ""
  vim.bo[buf].textwidth = 0
end

H.run(function()
  vim.cmd.edit(vim.fs.joinpath(os.getenv("WORKSPACE"), "session.py"))
  local buf = vim.api.nvim_get_current_buf()
  local prefix = os.getenv("PREFIX")
  vim.api.nvim_buf_set_lines(buf, 0, -1, false, vim.split(prefix, "\n", { plain = true }))
  require("completer").setup({
    cmd = { os.getenv("COMPLETER"), "serve", "--stdio" },
    init_options = vim.json.decode(os.getenv("OPTIONS")),
  })
  local client = H.wait_ready()
  ns = vim.api.nvim_get_namespaces()["completer"]
  plain_buffer(buf)

  -- The typing session: one key per character, at the scripted intervals, a pause after
  -- each line. Each key: the time to the ghost text at the cursor, if one came before the
  -- next key.
  vim.api.nvim_win_set_cursor(0, { vim.api.nvim_buf_line_count(buf), 0 })
  H.type("A")
  local session = {}
  local chars = vim.split(typed, "")
  for i, char in ipairs(chars) do
    local before = #keys
    vim.api.nvim_input(char == "\n" and "<CR>" or H.literal(char))
    H.wait(function()
      return #keys > before
    end, 5000, "the key to arrive")
    H.sleep(intervals[i] + (char == "\n" and pause_ms or 0))
    session[#session + 1] = { key = keys[before + 1], at = cursor(), char = char }
  end
  H.type("<Esc>")
  local results = {}
  for i, key in ipairs(session) do
    local next_key = session[i + 1] and session[i + 1].key or vim.uv.hrtime()
    local ms, kept = latency(key.key, next_key, key.at)
    results[#results + 1] = { ms = ms or vim.NIL, kept = kept or false }
  end
  H.check("typing", results)
  H.check("typed_text_matches", table.concat(vim.api.nvim_buf_get_lines(buf, 0, -1, false), "\n") == prefix .. typed)

  -- Tab to the next suggestion: at each hole, the suggestion read for READ_MS, Tab, and the
  -- time to the next ghost text at the new cursor.
  local tabs = {}
  for _, document in ipairs(vim.json.decode(os.getenv("HOLES"))) do
    local lines = vim.split(document, "\n", { plain = true })
    vim.api.nvim_buf_set_lines(buf, 0, -1, false, lines)
    vim.api.nvim_win_set_cursor(0, { #lines, 0 })
    H.type("A")
    local ok = pcall(H.wait, function()
      return H.ghost(buf)
    end, 30000)
    if ok then
      H.sleep(read_ms)
      local before = #keys
      vim.api.nvim_input("<Tab>")
      local arrived = H.wait(function()
        return #keys > before and keys[before + 1]
      end, 5000, "<Tab>")
      local tabbed = pcall(H.wait, function()
        return latency(arrived, math.huge, cursor())
      end, 30000)
      tabs[#tabs + 1] = tabbed and latency(arrived, math.huge, cursor()) or vim.NIL
    end
    H.type("<Esc>")
  end
  H.check("tab", tabs)
  local _, stats = H.request(client, "completer/stats")
  H.check("stats", { prefetches = stats.prefetches, prefetch_hits = stats.prefetch_hits, requests = stats.requests })
end)
