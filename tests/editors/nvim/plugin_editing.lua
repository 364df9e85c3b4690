-- Run by tests/editors/test_nvim_editing.py: editing as users do it, on Neovim 0.11 against the
-- real server with the smol models, in one Neovim so that the models load once: tabs,
-- emoji and CJK before the cursor, lines with a stray "\r" and CR-only files, keys typed
-- ahead of the server (feedkeys, macros), pastes, undo right after <Tab>, buffers closed
-- with requests in flight, and switching buffers while a next edit is shown. Each
-- section records what was shown and what the buffer became with H.check; the Python
-- side asserts. The server's items and edits are captured on their way to the plugin
-- (client.request wrapped), with the line each request was asked at, so that the Python
-- side computes what accepting should give from them, not from what the plugin drew.
--
-- Environment (besides harness.lua's): SECTIONS, the sections to run, comma-separated
-- (all when unset); ENCODING, the one position encoding the client offers, so that the
-- server negotiates it (Neovim offers utf-8, utf-16 and utf-32, and the server takes utf-16).
local here = vim.fs.dirname(debug.getinfo(1, "S").source:sub(2))
local H = dofile(vim.fs.joinpath(here, "harness.lua"))
local scenario = dofile(vim.fs.joinpath(here, "next_edit_scenario.lua"))

local INLINE_COMPLETION = "textDocument/inlineCompletion"
local INLINE_EDIT = "textDocument/copilotInlineEdit"
local ACCEPT_DESC = "completer: accept the suggestion"
local NEXT_EDIT_NS = "completer.next_edit"

local selected = nil -- section name -> true; nil: all
if os.getenv("SECTIONS") then
  selected = {}
  for name in os.getenv("SECTIONS"):gmatch("[^,]+") do
    selected[name] = true
  end
end

local client
local answers = {} -- each inlineCompletion answer: { buf, position, asked_line, items = { { text, range } } }
local edits = {} -- each copilotInlineEdit answer's edits, as the server sent them

--- Each inlineCompletion answer's items, with where it was asked (H.capture's `on_items`).
local function record_items(items, asked)
  local captured = {}
  for _, item in ipairs(items) do
    captured[#captured + 1] = { text = item.insertText, range = item.range or vim.NIL }
  end
  answers[#answers + 1] = { buf = asked.buf, position = asked.position, asked_line = asked.line, items = captured }
end

local function attached(buf)
  H.wait(function()
    return vim.api.nvim_buf_call(buf, function()
      return vim.fn.maparg("<Tab>", "i", false, true).desc == ACCEPT_DESC
    end)
  end, 10000, "the plugin's <Tab> in buffer " .. buf)
end

--- `bytes` written to `name` and opened from disk (with `++opt`s such as "++ff=mac"), in
--- Normal mode, the buffer before it hidden ('hidden'); returns the buffer once the plugin
--- is attached to it.
local function open(name, bytes, opts)
  local file = assert(io.open(H.path_of(name), "wb"))
  file:write(bytes)
  file:close()
  vim.cmd("edit " .. (opts and opts .. " " or "") .. vim.fn.fnameescape(H.path_of(name)))
  local buf = vim.api.nvim_get_current_buf()
  attached(buf)
  return buf
end

--- Python, its lines joined by `eol`, then `last` (and `eol`).
local function python(eol, last)
  return table.concat(H.STATS, eol) .. last .. eol
end

--- The lines of `buf` set to `lines`, the cursor on (row, col) (1-based row, byte column;
--- the last line's end by default), in Normal mode.
local function reset(buf, lines, row, col)
  vim.api.nvim_buf_set_lines(buf, 0, -1, false, lines)
  row = row or #lines
  vim.api.nvim_win_set_cursor(0, { row, col or #lines[row] })
end

local function cursor()
  return vim.api.nvim_win_get_cursor(0)
end

--- The last answer, once it is for `buf` at the cursor and its suggestion is drawn: the
--- ghost text, with the answer. (An answer for the text before a change may have been
--- drawn for a moment: the change clears it.)
local function wait_suggestion(buf, what)
  return H.wait(function()
    local answer, ghost = answers[#answers], H.ghost(buf)
    local row, col = unpack(cursor())
    if ghost and answer and answer.buf == buf and answer.position.line == row - 1 then
      local line = H.lines(buf)[row]
      local character = vim.str_utfindex(line, client.offset_encoding, col, false)
      if answer.position.character == character then
        return { ghost = ghost, answer = answer }
      end
    end
  end, 90000, "a suggestion " .. what)
end

--- In Insert mode in `buf` (entered by `keys`, typed first, if any): the suggestion
--- shown at the cursor, then <Tab>. What was seen, for H.check.
local function take(buf, keys, what)
  if keys then
    H.type(keys)
  end
  local found = wait_suggestion(buf, what)
  local before, at = H.lines(buf), cursor()
  local after = H.type_changing(buf, "<Tab>")
  return { before = before, cursor = at, ghost = found.ghost, answer = found.answer, after = after,
           after_cursor = cursor(), mode = vim.api.nvim_get_mode().mode, tabstop = vim.bo[buf].tabstop }
end

--- Type `keys` (key notation) into the typeahead at once, as a mapping or a macro does:
--- Neovim reads them all before any timer, LSP answer or TextChangedI.
local function feed(keys)
  vim.api.nvim_feedkeys(vim.keycode(keys), "t", false)
end

local function stats()
  local _, result = H.request(client, "completer/stats")
  return result
end

local function attached_count()
  return #vim.tbl_keys(client.attached_buffers)
end

--- The requests of `client` still in flight.
local function in_flight()
  local count = 0
  for _, request in pairs(client.requests) do
    count = count + (request.type == "pending" and 1 or 0)
  end
  return count
end

--- The server's sessions once every request was answered and the count held for ten
--- asks in a row (the closes and the work they cut short are done with).
local function settled_sessions(expected)
  local seen, last, same = {}, nil, 0
  local ok = pcall(H.wait, function()
    if in_flight() > 0 then
      return false
    end
    local sessions = stats().sessions
    if sessions ~= last then
      seen[#seen + 1] = sessions
      last, same = sessions, 0
    end
    same = same + 1
    return same >= 10 and (expected == nil or sessions == expected)
  end, 15000)
  return { sessions = last, seen = seen, settled = ok }
end

local function section(name, fn)
  if not selected or selected[name] then
    H.section(name, fn)
  end
end

H.run(function()
  -- Where nothing is shown, the plugin's <Tab> runs the user's own (jumping forward in
  -- the jumplist would switch buffers).
  H.map_user_tab()
  -- The next-edit section first, while shapes.py is the only file open (other open files
  -- would be context of the smol model's prompt for it), warmed at its cursor as in
  -- plugin_next_edit.lua.
  local shapes
  if not selected or selected.next_edit_switch then
    local file = assert(io.open(H.path_of("shapes.py"), "wb"))
    file:write(table.concat(scenario.TEXT, "\n") .. "\n")
    file:close()
    vim.cmd.edit(H.path_of("shapes.py"))
    shapes = vim.api.nvim_get_current_buf()
    vim.api.nvim_win_set_cursor(0, scenario.CURSOR)
  end
  local encoding = os.getenv("ENCODING")
  if encoding then
    -- Set in the request itself: Neovim deep-extends a configured list over its own by index.
    vim.lsp.config("completer", { before_init = function(params)
      params.capabilities.general.positionEncodings = { encoding }
    end })
  end
  -- The next-edit scenario's options: its small region, and the target decoding alone,
  -- whose answers are the same run after run.
  scenario.setup()
  client = H.wait_ready()
  H.check("encoding", client.offset_encoding)
  if shapes then
    scenario.wait_warmed(H, client)
  end
  H.capture(client, record_items, edits)
  local next_edit = require("completer.next_edit")

  section("next_edit_switch", function()
    -- A next edit shown in shapes.py; the user goes to another buffer, presses <Tab>
    -- there (Normal mode, then Insert mode), and comes back; then, with a next edit shown
    -- again, shapes.py is changed while the user is away (as :bufdo or a formatter does).
    attached(shapes)
    H.type("ciww")
    local shown = H.wait(function()
      local marks = scenario.marks(H, shapes)
      return #marks > 0 and marks
    end, 120000, "a next edit after renaming width to w")
    local answer = edits[#edits]
    H.type("<Esc>")
    local before, version = H.lines(shapes), vim.lsp.util.buf_versions[shapes]
    local other = open("other.py", python("\n", "def stdev(values)"))
    vim.api.nvim_win_set_cursor(0, { vim.api.nvim_buf_line_count(other), 0 })
    local other_before = H.lines(other)
    local away = { other_marks = H.marks(other, NEXT_EDIT_NS), shapes_marks = scenario.marks(H, shapes),
                   visible_in_other = next_edit.visible(other) }
    local presses = vim.g.user_tab
    H.type("<Tab>")
    away.user_tab = vim.g.user_tab - presses
    -- <Tab> right after entering Insert mode: no suggestion asked yet.
    H.type_changing(other, "A<Tab>")
    H.type("<Esc>")
    away.other_after = H.lines(other)
    away.shapes_after = H.lines(shapes)
    away.other_marks_after = H.marks(other, NEXT_EDIT_NS)
    vim.cmd.buffer(shapes)
    local back = { marks = scenario.marks(H, shapes), visible = next_edit.visible(shapes),
                   version = vim.lsp.util.buf_versions[shapes], lines = H.lines(shapes) }
    if back.visible then
      if not next_edit.at_cursor(shapes) then
        H.type("<Tab>") -- to the first edit
      end
      back.applied = H.type_changing(shapes, "<Tab>")
      back.undone = H.type_changing(shapes, "u")
    end
    H.check("next_edit_switch", { answer = answer, marks = shown, before = before, version = version,
                                  other_before = other_before, away = away, back = back })

    -- Changed while away.
    vim.api.nvim_win_set_cursor(0, { 4, 10 }) -- where the rename left it
    vim.cmd("CompleterNextEdit")
    local again = H.wait(function()
      local marks = scenario.marks(H, shapes)
      return #marks > 0 and marks
    end, 120000, "a next edit asked for with :CompleterNextEdit")
    local changed = { answer = edits[#edits], marks = again, version = vim.lsp.util.buf_versions[shapes] }
    vim.cmd.buffer(other)
    vim.api.nvim_buf_set_lines(shapes, -1, -1, false, { "# added while the user was in other.py" })
    changed.before = H.lines(shapes)
    changed.version_changed = vim.lsp.util.buf_versions[shapes]
    vim.cmd.buffer(shapes)
    changed.marks_back = scenario.marks(H, shapes) -- as the buffer is entered
    changed.gone = pcall(H.wait, function()
      return #scenario.marks(H, shapes) == 0
    end, 2000)
    changed.visible = next_edit.visible(shapes)
    presses = vim.g.user_tab
    H.type("<Tab>")
    H.type("<Tab>")
    changed.user_tab = vim.g.user_tab - presses
    changed.after = H.lines(shapes)
    changed.marks_after = scenario.marks(H, shapes)
    H.check("next_edit_changed_away", changed)
  end)

  section("tabs", function()
    -- Tab-indented Python with noexpandtab: a suggestion after a function's header (its
    -- body, indented with a tab), and one after a tab on the cursor's line.
    local buf = open("tabs.py", (table.concat({
      "import math", "", "", "def mean(values):", "\treturn sum(values) / len(values)", "", "",
      "def variance(values):", "\tm = mean(values)", "\treturn sum((x - m) ** 2 for x in values) / len(values)",
      "", "", "def stdev(values):" }, "\n") .. "\n"))
    vim.bo[buf].expandtab = false
    vim.bo[buf].softtabstop = 0
    vim.bo[buf].shiftwidth = 0
    vim.bo[buf].tabstop = 4
    local lines = H.lines(buf)
    reset(buf, lines)
    local header = take(buf, "A", "after def stdev(values):")
    H.type("<Esc>")
    lines[#lines + 1] = "\tm = mean(values)"
    lines[#lines + 1] = "\treturn math.sqrt("
    reset(buf, lines)
    local body = take(buf, "A", "after a tab")
    H.type("<Esc>")
    H.check("tabs", { header = header, body = body, expandtab = vim.bo[buf].expandtab })
  end)

  section("unicode", function()
    -- Emoji (4 bytes, 2 UTF-16 units, 1 UTF-32 unit) and CJK (3 bytes, 1 unit) before the
    -- cursor: at the end of a line, and in its middle with more of them after it.
    local lines = {
      "GREETINGS = {",
      '    "en": "hello 👋",',
      '    "ja": "こんにちは 🌸",',
      '    "zh": "你好 🐼",',
      "}",
      "",
      "",
      "def greet(lang):",
      '    print("👋 世界 " + GREETINGS[])  # 挨拶 🐼',
    }
    local buf = open("greet.py", table.concat(lines, "\n") .. "\n")
    local row = #lines
    reset(buf, lines, row, (lines[row]:find("])", 1, true)) - 1) -- on the "]"
    local middle = take(buf, "i", "between [ and ]")
    H.type("<Esc>")
    lines[row] = '    banner = "🐼 你好, " + '
    reset(buf, lines)
    local ending = take(buf, "A", "after emoji and CJK")
    H.type("<Esc>")
    H.check("unicode", { middle = middle, ending = ending })
  end)

  section("stray_cr", function()
    -- CRLF lines and a last LF one: Neovim opens the file with 'fileformat' unix, a "\r"
    -- (^M) at the end of each CRLF line. The cursor is on such a line, before its ^M
    -- (Insert mode with `i`): at its end, and before a ")". For the server, "\r\n" is
    -- one line break: the ^M is no text of the line, for the item to replace.
    local bytes = table.concat(H.STATS, "\r\n") .. "def stdev(values):\r\n    return math.sqrt(\r\n\r\n\r\n"
      .. "def spread(values):\r\n    return max(values) - min()\r\n# end\n"
    local buf = open("stray_cr.py", bytes)
    local takes = {}
    for _, at in ipairs({ { row = 13, before = "\r" }, { row = 17, before = ")\r" } }) do
      local line = H.lines(buf)[at.row]
      vim.api.nvim_win_set_cursor(0, { at.row, #line - #at.before })
      takes[#takes + 1] = take(buf, "i", "before " .. vim.inspect(at.before))
      H.type("<Esc>")
    end
    vim.cmd.write()
    H.check("stray_cr", { takes = takes, fileformat = vim.bo[buf].fileformat, bytes_before = bytes,
                          bytes_after = H.read("stray_cr.py") })
  end)

  section("mac", function()
    -- A CR-only file, opened with ++ff=mac: Neovim splits its lines at "\r" and sends
    -- them joined by "\r", one of LSP's line breaks.
    local bytes = python("\r", "class Stats")
    local buf = open("mac.py", bytes, "++ff=mac")
    vim.api.nvim_win_set_cursor(0, { vim.api.nvim_buf_line_count(buf), 0 })
    local found = take(buf, "A", "in a CR-only file")
    H.type("<Esc>")
    vim.cmd.write()
    found.fileformat, found.bytes_before, found.bytes_after = vim.bo[buf].fileformat, bytes, H.read("mac.py")
    H.check("mac", found)
  end)

  section("typed_ahead", function()
    -- A suggestion shown; then a character and <Tab> typed ahead in one go (a mapping,
    -- a macro or feedkeys): <Tab> comes before TextChangedI. A character that is not the
    -- suggestion's next one leaves a suggestion for the text before it: <Tab> types a tab
    -- (the python ftplugin's blanks). The suggestion's own next character keeps it: <Tab>
    -- takes the rest.
    local buf = open("typed_ahead.py", python("\n", "def stdev(values)"))
    local lines = H.lines(buf)
    local results = {}
    for _, matching in ipairs({ false, true }) do
      reset(buf, lines)
      H.type("A")
      local found = wait_suggestion(buf, "to type ahead of")
      local first = found.ghost.text:sub(1, 1)
      local char = matching and first or (first == "#" and "@" or "#")
      local before = H.lines(buf)
      vim.g.ghost_visible = nil
      feed(char .. "<Cmd>let g:ghost_visible = v:lua.require'completer.ghost'.visible(bufnr())<CR><Tab>")
      local typed = vim.deepcopy(before)
      typed[#typed] = typed[#typed] .. char
      H.wait(function()
        return type(vim.g.ghost_visible) == "boolean" and not vim.deep_equal(H.lines(buf), typed)
      end, 5000, "the keys typed ahead")
      local after = H.lines(buf)
      H.type("<Esc>")
      results[#results + 1] = { matching = matching, char = char, ghost = found.ghost, answer = found.answer,
                                before = before, visible_at_tab = vim.g.ghost_visible, after = after }
    end
    H.check("typed_ahead", results)
  end)

  section("macro", function()
    -- A macro recorded while a suggestion was shown and taken (qq A <Tab> <Esc> q), then
    -- replayed on another line with @q: its <Tab> comes right after A, before anything
    -- is asked; and one set with setreg that types text and <Tab> in one go.
    local buf = open("macro.py", python("\n", "def stdev(values)"))
    local lines = H.lines(buf)
    reset(buf, lines)
    H.type("qq")
    local recorded = take(buf, "A", "while recording")
    H.type("<Esc>")
    H.type("q")
    local register = vim.fn.getreg("q")
    local replays = {}
    for _, replay in ipairs({ { line = "    center = mean(", keys = "@q" },
                              { line = "def spread(values", keys = "@w", register = "A):\t\27" } }) do
      if replay.register then
        vim.fn.setreg("w", replay.register)
      end
      local before = vim.deepcopy(lines)
      before[#before] = replay.line
      reset(buf, before)
      local after = H.type_changing(buf, replay.keys)
      H.wait(function()
        return vim.api.nvim_get_mode().mode == "n"
      end, 5000, "the macro to end")
      replays[#replays + 1] = { keys = replay.keys, before = before, after = H.lines(buf), changed = after }
    end
    H.check("macro", { recorded = recorded, register = register, replays = replays })
  end)

  section("paste", function()
    -- A block put from a register in Normal mode ("ap, the cursor then taken to its last
    -- line's end), and one pasted in Insert mode (nvim_paste, as a terminal's paste):
    -- the suggestion asked for after it shows and applies at the cursor.
    local block = "def stdev(values):\n    m = mean(values)\n    return math.sqrt(sum((x - m) ** 2 for x in "
    local buf = open("paste.py", python("\n", ""))
    local lines = H.lines(buf)
    vim.fn.setreg("a", block, "c")
    reset(buf, lines)
    H.type_changing(buf, '"ap')
    local put = take(buf, "GA", "after a put")
    H.type("<Esc>")
    reset(buf, lines)
    H.type("A")
    vim.api.nvim_paste(block, false, -1)
    local pasted = take(buf, nil, "after a paste in Insert mode")
    H.type("<Esc>")
    H.check("paste", { block = block, lines = lines, put = put, pasted = pasted })
  end)

  section("undo", function()
    -- <Tab> then `u`: the text before the suggestion was taken comes back, and what is
    -- shown next is for that text. Once with nothing typed before <Tab>, once with a
    -- character typed (its own suggestion then), once with `u` typed ahead right after
    -- <Tab> (<C-o>u, in Insert mode, before the next suggestion is asked).
    local buf = open("undo.py", python("\n", "def stdev(values"))
    local lines = H.lines(buf)
    local results = {}
    for _, case in ipairs({ { typed = "" }, { typed = ")" }, { typed = "", ahead = true } }) do
      reset(buf, lines)
      H.type("A")
      if case.typed ~= "" then
        H.type_changing(buf, case.typed)
      end
      local result
      if case.ahead then
        local found = wait_suggestion(buf, "to take and undo")
        result = { before = H.lines(buf), cursor = cursor(), ghost = found.ghost, answer = found.answer }
        feed("<Tab><C-o>u")
        H.wait(function()
          local tree = vim.fn.undotree()
          return vim.api.nvim_get_mode().mode == "i" and tree.seq_cur < tree.seq_last
        end, 5000, "<Tab><C-o>u")
        result.undone = H.lines(buf)
      else
        result = take(buf, nil, "to take and undo")
        H.type("<Esc>")
        result.undone = H.type_changing(buf, "u")
        result.ghost_after_undo = H.ghost(buf) or vim.NIL
        H.type("A")
      end
      -- The next suggestion, in Insert mode on the text as `u` left it.
      local again = wait_suggestion(buf, "after u")
      result.again = { ghost = again.ghost, answer = again.answer, cursor = cursor(), lines = H.lines(buf) }
      H.type("<Esc>")
      result.typed, result.ahead = case.typed, case.ahead or false
      results[#results + 1] = result
    end
    H.check("undo", results)
  end)

  section("close", function()
    -- Buffers closed with requests in flight: a suggestion's (:bdelete!), a suggestion's
    -- and a next edit's (:bwipeout!). Then every buffer, with a suggestion's request in
    -- flight in the current one. The server keeps a session for each document it
    -- completed in or warmed, and none for a closed one.
    H.wait(function()
      return in_flight() == 0
    end, 60000, "the requests of the sections before")
    local result = { attached_before = attached_count(), before = settled_sessions(nil), closes = {} }
    local function close_in_flight(name, close, next_edit_too)
      local buf = open(name, python("\n", "def stdev(values)"))
      vim.api.nvim_win_set_cursor(0, { vim.api.nvim_buf_line_count(buf), 0 })
      local done
      vim.api.nvim_create_autocmd("LspRequest", {
        buffer = buf,
        callback = function(args)
          local request = args.data.request
          if request.method ~= INLINE_COMPLETION or request.type ~= "pending" then
            return
          end
          local id = args.data.request_id
          vim.schedule(function()
            local closing = { inline = client.requests[id] ~= nil }
            if next_edit_too then
              vim.cmd("CompleterNextEdit")
              closing.next_edit = next(vim.tbl_filter(function(r)
                return r.bufnr == buf and r.method == INLINE_EDIT and r.type == "pending"
              end, client.requests)) ~= nil
            end
            vim.cmd(close .. " " .. buf)
            closing.loaded = vim.api.nvim_buf_is_loaded(buf)
            done = closing
          end)
          return true -- once
        end,
      })
      H.type("Ax")
      H.wait(function()
        return done
      end, 30000, "a request to close " .. name .. " on")
      H.type("<Esc>")
      return done
    end
    result.closes[#result.closes + 1] = close_in_flight("close_delete.py", "bdelete!", false)
    result.closes[#result.closes + 1] = close_in_flight("close_wipe.py", "bwipeout!", true)
    result.attached_after = attached_count()
    result.after = settled_sessions(result.attached_after)

    -- Every buffer, from Insert mode with a request in flight.
    local buf = open("close_all.py", python("\n", "def stdev(values)"))
    vim.api.nvim_win_set_cursor(0, { vim.api.nvim_buf_line_count(buf), 0 })
    local all
    vim.api.nvim_create_autocmd("LspRequest", {
      buffer = buf,
      callback = function(args)
        if args.data.request.method ~= INLINE_COMPLETION or args.data.request.type ~= "pending" then
          return
        end
        local id = args.data.request_id
        vim.schedule(function()
          all = { inline = client.requests[id] ~= nil }
          vim.cmd("%bwipeout!")
        end)
        return true
      end,
    })
    H.type("Ax")
    H.wait(function()
      return all
    end, 30000, "a request to close every buffer on")
    H.type("<Esc>")
    all.attached = attached_count()
    all.sessions = settled_sessions(0)
    result.all = all
    H.check("close", result)
  end)

  section("close_warm", function()
    -- A buffer wiped out as the plugin attaches to it, while the completer/warm that
    -- attaching sent waits for the engine (busy with a next edit of another buffer). The
    -- window then shows a buffer the plugin is not attached to: no newer warm takes over
    -- from the one in flight. Six times: the warm and the close race.
    local buf = open("close_warm.py", python("\n", "def stdev(values)"))
    local results = {}
    for n = 1, 6 do
      local expected = attached_count()
      local name = "close_warm" .. n .. ".py"
      local file = assert(io.open(H.path_of(name), "wb"))
      file:write(python("\n", "def stdev(values)"))
      file:close()
      -- Not empty: :edit would take an empty buffer with no name over for the file.
      local scratch = vim.api.nvim_create_buf(true, false)
      vim.bo[scratch].buftype = "nofile"
      vim.api.nvim_buf_set_lines(scratch, 0, -1, false, { "scratch" })
      local wiped
      vim.api.nvim_create_autocmd("LspAttach", {
        once = true,
        callback = function(args)
          vim.schedule(function()
            vim.cmd("bwipeout! " .. args.buf)
            wiped = true
          end)
        end,
      })
      vim.cmd("CompleterNextEdit")
      vim.api.nvim_set_current_buf(scratch)
      vim.cmd.edit(H.path_of(name))
      H.wait(function()
        return wiped
      end, 10000, name .. " attached and wiped out")
      local unattached = vim.api.nvim_get_current_buf() == scratch
      local sessions = settled_sessions(nil)
      results[#results + 1] = { attached = expected, sessions = sessions.sessions, seen = sessions.seen,
                                unattached = unattached }
      vim.api.nvim_set_current_buf(buf)
      vim.api.nvim_buf_delete(scratch, { force = true })
    end
    H.check("close_warm", results)
  end)
end)
