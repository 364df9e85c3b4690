-- Run by tests/editors/test_nvim_plugin.py: the plugin on Neovim 0.11 against the real server
-- with the smol models, in one Neovim so that the models load once. Each section types
-- as a user would and records what it saw with H.check; a section that fails is
-- recorded under its name and the next one runs. The Python side asserts, with its own
-- reading of what a line and a word are.
local H = dofile(vim.fs.joinpath(vim.fs.dirname(debug.getinfo(1, "S").source:sub(2)), "harness.lua"))

local BASE = H.STATS
local ACCEPT_DESC = "completer: accept the suggestion"

local completer, client
local buf -- stats.py, where the user had mappings before setup()

--- BASE and `last` in `buf`, the cursor on `last`, in Normal mode.
local function reset(last)
  local lines = vim.list_extend(vim.deepcopy(BASE), { last })
  vim.api.nvim_buf_set_lines(buf, 0, -1, false, lines)
  vim.api.nvim_win_set_cursor(0, { #lines, 0 })
  return lines
end

local function last_line()
  local lines = H.lines(buf)
  return lines[#lines]
end

-- textDocument/inlineCompletion requests the plugin sent, and the answers that came.
local inline_requests, inline_answers = 0, 0
vim.api.nvim_create_autocmd("LspRequest", {
  callback = function(args)
    local request = args.data.request
    if request.method == "textDocument/inlineCompletion" and request.type == "pending" then
      inline_requests = inline_requests + 1
    elseif request.method == "textDocument/inlineCompletion" and request.type == "complete" then
      inline_answers = inline_answers + 1
    end
  end,
})

local function wait_ghost(what)
  return H.wait(function()
    return H.ghost(buf)
  end, 90000, what)
end

local function stat(name)
  local _, result = H.request(client, "completer/stats")
  return result[name]
end

local function accepted()
  return stat("suggestions_accepted")
end

local function acceptance_stats()
  local _, result = H.request(client, "completer/stats")
  return { accepted = result.suggestions_accepted, partially = result.suggestions_partially_accepted,
           chars = result.accepted_chars, seen = result.suggestions_seen }
end

--- Type `keys` on a fresh `last` line (in one go: Insert mode's first key and the
--- next, before any request) and return the line once it changed.
local function type_on(last, keys)
  reset(last)
  H.type(keys)
  H.wait(function()
    return last_line() ~= last
  end, 5000, keys)
  H.sleep(50)
  local line = last_line()
  H.type("<Esc>")
  return line
end

H.run(function()
  -- The user's own mappings, made before setup(): a global Lua callback on <Tab>, a
  -- global <expr> mapping on <C-]> and, below, a buffer-local one on <C-B>.
  vim.g.user_tab = 0
  vim.keymap.set("i", "<Tab>", function()
    vim.g.user_tab = vim.g.user_tab + 1
  end)
  vim.cmd([[inoremap <expr> <C-]> "[dismissed]"]])
  vim.cmd.edit(vim.fs.joinpath(os.getenv("WORKSPACE"), "stats.py"))
  buf = vim.api.nvim_get_current_buf()
  vim.cmd("inoremap <buffer> <C-B> WORD")
  reset("")

  completer = require("completer")
  completer.setup({
    cmd = { os.getenv("COMPLETER"), "serve", "--stdio" },
    -- 24 tokens: the "partial" section needs a suggestion of 3+ lines. Which near ties
    -- auto's verify batches flip depends on the machine's timing, and in one CI run 16
    -- tokens after "class Stats" held only two lines.
    init_options = { models = { preset = "smol" }, generation = { max_tokens = 24, time_budget_ms = 0 } },
    stats_interval_ms = 200,
  })
  client = H.wait(H.client, 30000, "the client")
  H.check("statusline_loading", completer.statusline())
  H.wait_ready()
  H.wait(function()
    return vim.fn.maparg("<Tab>", "i", false, true).desc == ACCEPT_DESC
  end, 10000, "the plugin's <Tab> in stats.py")

  H.section("fallback", function()
    -- Nothing shown: the keys do what the user's mappings did, and keys typed after
    -- them stay after.
    local presses = vim.g.user_tab
    H.check("fallback_tab", { line = type_on("x = 1", "A<Tab>z"), user_tab = vim.g.user_tab - presses })
    H.check("fallback_expr", type_on("x = 1", "A<C-]>z"))
    H.check("fallback_buffer_local", type_on("x = 1", "A<C-B>z"))
  end)

  H.section("accept_all", function()
    -- The buffer gets exactly the suggestion shown, and the server counts it; the next
    -- suggestion, asked after <Tab>, comes from what the server computed while this one
    -- was shown (lsp.prefetch).
    local before = reset("def stdev(values)")
    local prefetch_before = stat("prefetches")
    H.type("A")
    local shown = wait_ghost("a suggestion after def stdev(values)")
    local prefetching = pcall(H.wait, function()
      return stat("prefetches") > prefetch_before
    end, 60000)
    local _, stats_before = H.request(client, "completer/stats")
    local count, presses, requests, answers = accepted(), vim.g.user_tab, inline_requests, inline_answers
    H.type("<Tab>")
    H.wait(function()
      return not vim.deep_equal(H.lines(buf), before)
    end, 5000, "<Tab> to accept")
    H.check("accept_all", {
      before = before,
      ghost = shown,
      after = H.lines(buf),
      cursor = vim.api.nvim_win_get_cursor(0),
      mode = vim.api.nvim_get_mode().mode,
      user_tab = vim.g.user_tab - presses,
    })
    local counted = pcall(H.wait, function()
      return accepted() > count
    end, 60000)
    H.check("accept_all_counted", { before = count, after = accepted(), counted = counted })
    -- What the server did for the request <Tab> made, read once that request is answered:
    -- a prefetch still running holds its answer until it is done, however long a loaded
    -- machine takes, so a fixed wait for the count would race it.
    H.wait(function()
      return inline_answers > answers
    end, 120000, "the answer to the request after <Tab>")
    local _, stats_after = H.request(client, "completer/stats")
    local after_tab = { inline_requests = inline_requests - requests }
    for _, name in ipairs({ "requests", "prefetch_hits", "forward_cache_hits", "superseded" }) do
      after_tab[name] = stats_after[name] - stats_before[name]
    end
    H.check("accept_all_prefetched", { prefetching = prefetching, after_tab = after_tab })
  end)

  H.section("typing", function()
    -- Typing what the suggestion shows next keeps it, shifted, with no new request; a
    -- backspace brings the character back; anything else clears it.
    reset("    center = mean(")
    H.type("A")
    local first = wait_ghost("a suggestion after center = mean(")
    local requests = inline_requests
    local char = first.text:sub(1, 1)
    H.type(H.literal(char))
    H.sleep(400) -- longer than the debounce: a request would have gone
    local typed = H.ghost(buf)
    local requests_after_typing = inline_requests
    H.type("<BS>")
    local back = H.ghost(buf)
    local other = char == "#" and "@" or "#"
    H.type(other)
    local cleared = H.ghost(buf)
    H.check("typing", {
      first = first,
      typed_char = char,
      typed = typed or vim.NIL,
      requests_before = requests,
      requests_after = requests_after_typing,
      back = back or vim.NIL,
      other = other,
      cleared = cleared or vim.NIL,
    })
    -- Moving the cursor and leaving Insert mode clear it too, as the dismiss key does
    -- (which does not do what the user's <C-]> does then).
    H.type("<Esc>")
    reset("    center = mean(")
    H.type("A")
    wait_ghost("a suggestion to move away from")
    H.type("<Left>")
    H.check("cursor_move_clears", H.ghost(buf) == nil)
    H.type("<Esc>")
    reset("    center = mean(")
    H.type("A")
    wait_ghost("a suggestion again")
    H.type("<Esc>")
    H.check("insert_leave_clears", H.ghost(buf) == nil)
    reset("    center = mean(")
    H.type("A")
    wait_ghost("a suggestion to dismiss")
    H.type("<C-]>")
    H.check("dismissed", { ghost = H.ghost(buf) or vim.NIL, line = last_line() })
  end)

  H.section("partial", function()
    -- Accept line, twice, then accept word: each takes only its piece; the rest stays.
    local before = reset("class Stats")
    H.type("A")
    local shown = wait_ghost("a suggestion after class Stats")
    local count = acceptance_stats()
    local steps = {}
    for _, key in ipairs({ "<S-Tab>", "<S-Tab>", "<C-B>" }) do
      local lines = H.type_changing(buf, key)
      local ghost = H.ghost(buf)
      steps[#steps + 1] = { key = key, lines = lines, ghost = ghost and ghost.text or vim.NIL,
                            cursor = vim.api.nvim_win_get_cursor(0) }
      if not ghost then
        break
      end
    end
    H.sleep(500)
    H.check("partial", { before = before, ghost = shown, steps = steps, stats_before = count,
                         stats_after = acceptance_stats() })
  end)

  H.section("fallback_raw", function()
    -- No mapping before: <Tab> types a tab (in a buffer opened after the user's global
    -- <Tab> mapping is gone).
    vim.keymap.del("i", "<Tab>")
    vim.cmd.edit(vim.fs.joinpath(os.getenv("WORKSPACE"), "notes.py"))
    local notes = vim.api.nvim_get_current_buf()
    vim.bo[notes].expandtab = false
    vim.bo[notes].softtabstop = 0
    vim.api.nvim_buf_set_lines(notes, 0, -1, false, { "x = 1" })
    H.wait(function()
      return vim.fn.maparg("<Tab>", "i", false, true).desc == ACCEPT_DESC
    end, 10000, "the plugin's <Tab> in notes.py")
    local presses = vim.g.user_tab
    H.type("A<Tab>y")
    H.wait(function()
      return H.lines(notes)[1] ~= "x = 1"
    end, 5000, "a tab")
    H.sleep(50)
    H.check("fallback_raw", { line = H.lines(notes)[1], user_tab = vim.g.user_tab - presses })
    H.type("<Esc>")
    vim.cmd.buffer(buf)
  end)

  H.section("candidates", function()
    -- generation.candidates 3 (sent as the settings change): <M-]> shows the next
    -- candidate, <M-[> the one before, and <Tab> takes the one shown.
    client:notify("workspace/didChangeConfiguration",
      { settings = { completer = { generation = { candidates = 3 } } } })
    local before = reset("    label = '")
    H.type("A")
    local first = wait_ghost("a suggestion with candidates")
    local function shows(text)
      return function()
        local ghost = H.ghost(buf)
        return ghost and ghost.text == text
      end
    end
    H.type("<M-]>")
    local second = H.wait(function()
      local ghost = H.ghost(buf)
      return ghost and ghost.text ~= first.text and ghost
    end, 5000, "the next candidate")
    H.type("<M-[>")
    H.wait(shows(first.text), 5000, "the first candidate again")
    H.type("<M-]>")
    H.wait(shows(second.text), 5000, "the second candidate again")
    H.type("<Tab>")
    H.wait(function()
      return last_line() ~= before[#before]
    end, 5000, "the second candidate accepted")
    H.check("candidates", { before = before, first = first.text, second = second.text, after = H.lines(buf) })
    H.type("<Esc>")
    client:notify("workspace/didChangeConfiguration",
      { settings = { completer = { generation = { candidates = 1 } } } })
  end)

  H.section("menu", function()
    -- A popup menu opened over a suggestion hides it, nothing is asked while the menu is
    -- open, and <Tab> does what it did before (the user's mapping, which would pick from
    -- the menu).
    reset("    center = mean(")
    H.type("A")
    local shown = wait_ghost("a suggestion to open a menu over")
    -- Keyword completion: the buffer's words, none inserted, so that only the menu
    -- opening (CompleteChanged) can hide the suggestion.
    local completeopt = vim.o.completeopt
    vim.o.completeopt = "menu,menuone,noinsert,noselect"
    H.type("<C-n>")
    H.wait(function()
      return vim.fn.pumvisible() == 1
    end, 5000, "the popup menu")
    local requests = inline_requests
    H.sleep(1000) -- past the debounce
    local with_menu = { ghost = H.ghost(buf) or vim.NIL, pum = vim.fn.pumvisible(), requests = inline_requests - requests }
    local presses = vim.g.user_tab
    H.type("<Tab>")
    H.wait(function()
      return vim.g.user_tab ~= presses
    end, 5000, "the user's <Tab> mapping")
    H.check("menu", { shown = shown.text, with_menu = with_menu, line = last_line(),
                      user_tab = vim.g.user_tab - presses })
    H.type("<C-e><Esc>")
    vim.o.completeopt = completeopt
  end)

  H.section("toggle", function()
    -- The statusline, :CompleterToggle and :CompleterStats.
    local shows, line = pcall(H.wait, function()
      local status = completer.statusline()
      return status:match("^completer: %d+%% accepted, [%d.]+ tok/s$") and status
    end, 10000)
    H.check("statusline_ready", shows and line or completer.statusline())
    vim.cmd("CompleterToggle") -- for python, stats.py's filetype
    H.check("statusline_off", completer.statusline())
    local requests, presses = inline_requests, vim.g.user_tab
    reset("def stdev(values)")
    H.type("A")
    H.type("x")
    H.sleep(1500)
    local ghost_off = H.ghost(buf)
    H.type("<Tab>") -- falls through to the user's mapping, as with nothing shown
    H.check("toggled_off", { ghost = ghost_off or vim.NIL, requests_before = requests,
                             requests_after = inline_requests, user_tab = vim.g.user_tab - presses })
    H.type("<Esc>")
    -- Another filetype still gets suggestions.
    vim.cmd.edit(vim.fs.joinpath(os.getenv("WORKSPACE"), "todo.txt"))
    local notes = vim.api.nvim_get_current_buf()
    vim.api.nvim_buf_set_lines(notes, 0, -1, false, { "Things to do:", "1. write the tests", "2. run the tests" })
    H.wait(function()
      return vim.fn.maparg("<Tab>", "i", false, true).desc == ACCEPT_DESC
    end, 10000, "the plugin's <Tab> in todo.txt")
    H.type("Go")
    H.check("other_filetype", { filetype = vim.bo[notes].filetype, shown = (pcall(H.wait, function()
      return H.ghost(notes)
    end, 90000)) })
    H.type("<Esc>")
    vim.cmd.buffer(buf)
    vim.cmd("CompleterToggle")
    reset("def stdev(values)")
    H.type("A")
    H.check("toggled_on", (pcall(wait_ghost, "a suggestion after :CompleterToggle again")))
    H.type("<Esc>")
    vim.cmd("CompleterStats")
    H.check("stats_printed", (pcall(H.wait, function()
      return vim.fn.execute("messages"):find("suggestions_accepted")
    end, 10000)))
  end)
end)
