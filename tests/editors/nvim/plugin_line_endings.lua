-- Run by tests/editors/test_nvim_line_endings.py: ghost text and next edits in files whose lines
-- end in "\r\n", on Neovim 0.11 against the real server with the smol models, in one
-- Neovim so that the models load once. Each section writes a file's bytes, opens it,
-- takes a multi-line suggestion (whole, or a line and a word at a time) or a next edit,
-- writes the buffer back and records the bytes on disk. The items and edits the server
-- sent are captured on their way to the plugin (client.request wrapped), so that the
-- Python side computes the expected bytes from them, not from what the plugin drew.
local here = vim.fs.dirname(debug.getinfo(1, "S").source:sub(2))
local H = dofile(vim.fs.joinpath(here, "harness.lua"))
local scenario = dofile(vim.fs.joinpath(here, "next_edit_scenario.lua"))

local client
local answers = {} -- each inlineCompletion answer's insertTexts, as the server sent them
local edits = {} -- each copilotInlineEdit answer's edits, as the server sent them

--- Each inlineCompletion answer's insertTexts (H.capture's `on_items`).
local function record_texts(items)
  local texts = {}
  for _, item in ipairs(items) do
    texts[#texts + 1] = item.insertText
  end
  answers[#answers + 1] = texts
end

--- `bytes` written to `name` and opened (again, from disk), the cursor at the end of the
--- last line, in Normal mode. Returns the buffer.
local function open(name, bytes)
  local file = assert(io.open(H.path_of(name), "wb"))
  file:write(bytes)
  file:close()
  vim.cmd.edit({ args = { H.path_of(name) }, bang = true })
  local buf = vim.api.nvim_get_current_buf()
  vim.api.nvim_win_set_cursor(0, { vim.api.nvim_buf_line_count(buf), 0 })
  return buf
end

--- In `name` (opened with `bytes`), Insert mode at the end of the last line: the
--- suggestion shown, then `keys` typed one after the other (each changing the buffer);
--- the buffer written back. What was seen and the bytes on disk, for H.check.
local function take(name, bytes, keys)
  local buf = open(name, bytes)
  H.wait(function()
    return vim.fn.maparg("<Tab>", "i", false, true).desc == "completer: accept the suggestion"
  end, 10000, "the plugin's <Tab> in " .. name)
  H.type("A")
  local shown = H.wait(function()
    return H.ghost(buf)
  end, 90000, "a suggestion in " .. name)
  local texts = answers[#answers]
  local steps = {}
  for _, key in ipairs(keys) do
    local lines = H.type_changing(buf, key)
    local ghost = H.ghost(buf)
    steps[#steps + 1] = { key = key, lines = lines, ghost = ghost and ghost.text or vim.NIL }
  end
  H.type("<Esc>")
  vim.cmd.write()
  return {
    fileformat = vim.bo[buf].fileformat, item = texts[1] or vim.NIL, ghost = shown.text,
    steps = steps, lines = H.lines(buf), before = bytes, after = H.read(name),
  }
end

--- Python, its lines ended by `eol`, then "class Stats" (a suggestion of several lines)
--- ended by `last_eol`.
local function python(eol, last_eol)
  return table.concat(H.STATS, eol) .. "class Stats" .. last_eol
end

--- The next-edit scenario's text in a CRLF file.
local SHAPES = table.concat(scenario.TEXT, "\r\n") .. "\r\n"

H.run(function()
  -- The next-edit section first, in the file the server warms at its cursor: the smol
  -- model suggests the rename there as it does in plugin_next_edit.lua (other open files
  -- would be context of its prompt).
  local shapes = open("shapes.py", SHAPES)
  vim.api.nvim_win_set_cursor(0, scenario.CURSOR)
  require("completer").setup({
    cmd = { os.getenv("COMPLETER"), "serve", "--stdio" },
    -- Several lines after "class Stats" (as the "partial" section of plugin_ghost.lua),
    -- the next-edit scenario's small region, and the target decoding alone: speculation's
    -- verify batches flip near ties by the machine's timing, and the smol model's answer
    -- is the same run after run only without them.
    init_options = { models = { preset = "smol" },
                     generation = { max_tokens = 24, time_budget_ms = 0, draft_mode = "target" },
                     edits = { lines_above = 3, lines_below = 3, context_lines = 2 } },
  })
  client = H.wait_ready()
  scenario.wait_warmed(H, client)
  H.capture(client, record_texts, edits)

  H.section("dos_next_edit", function()
    -- The next-edit scenario's rename in a CRLF file (Neovim opened it with 'fileformat'
    -- dos): the edits' new text holds the document's "\r\n". <Tab> goes to them, <Tab>
    -- again applies them.
    H.wait(function()
      return vim.fn.maparg("<Tab>", "n", false, true).desc == "completer: go to the next edit, or apply it"
    end, 10000, "the plugin's Normal-mode <Tab>")
    H.type("ciww")
    local found, shown = pcall(H.wait, function()
      local marks = scenario.marks(H, shapes)
      return #marks > 0 and marks
    end, 120000)
    if not found then
      error("no next edit shown after renaming width to w; the server's answers: " .. vim.inspect(edits))
    end
    local answer = edits[#edits]
    local before = H.lines(shapes)
    H.type("<Esc>")
    if not require("completer.next_edit").at_cursor(shapes) then
      H.type("<Tab>") -- to the first edit
    end
    H.type_changing(shapes, "<Tab>") -- applies the edits
    vim.cmd.write()
    H.check("dos_next_edit", { fileformat = vim.bo[shapes].fileformat, edits = answer, marks = shown,
                               before = before, lines = H.lines(shapes), after = H.read("shapes.py") })
  end)

  H.section("dos_accept", function()
    -- A CRLF file: Neovim opens it with 'fileformat' dos, its lines without "\r".
    H.check("dos_accept", take("dos.py", python("\r\n", "\r\n"), { "<Tab>" }))
  end)

  H.section("dos_partial", function()
    H.check("dos_partial", take("dos_partial.py", python("\r\n", "\r\n"), { "<S-Tab>", "<S-Tab>", "<C-B>" }))
  end)

  H.section("mixed_accept", function()
    -- CRLF lines and a last LF one: Neovim opens it with 'fileformat' unix, a "\r" (^M)
    -- at the end of each CRLF line.
    H.check("mixed_accept", take("mixed.py", python("\r\n", "\n"), { "<Tab>" }))
  end)
end)
