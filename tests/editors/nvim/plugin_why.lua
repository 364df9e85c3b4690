-- Run by tests/editors/test_nvim_why.py: :CompleterWhy on Neovim 0.11 against the real server
-- with the smol models, in a workspace whose shop/orders.py calls what shop/client.py and
-- shop/transport.py define (tests/shop_repository.py). Before any completion it gives a
-- message; after one, the scratch buffer, recorded with the server's own completer/prompt
-- answer for the Python side to read the buffer against; asked again, the same buffer.
local here = vim.fs.dirname(debug.getinfo(1, "S").source:sub(2))
local H = dofile(vim.fs.joinpath(here, "harness.lua"))

local function why_buffer()
  local buf = vim.fn.bufnr("completer://why")
  return buf ~= -1 and buf or nil
end

--- What :CompleterWhy left on screen: the view's buffer and how it is shown.
local function view(buf)
  return {
    lines = H.lines(buf), buftype = vim.bo[buf].buftype, filetype = vim.bo[buf].filetype,
    modifiable = vim.bo[buf].modifiable, current = vim.api.nvim_get_current_buf() == buf,
    windows = #vim.api.nvim_tabpage_list_wins(0),
  }
end

H.run(function()
  vim.cmd.edit(H.path_of("shop/orders.py"))
  local orders = vim.api.nvim_get_current_buf()
  vim.api.nvim_win_set_cursor(0, { vim.api.nvim_buf_line_count(orders), 0 })
  require("completer").setup({
    cmd = { os.getenv("COMPLETER"), "serve", "--stdio" },
    -- The target decoding alone, and no prefetch: the last decoded completion is the one
    -- shown, whose prompt the test reads.
    init_options = { models = { preset = "smol" }, lsp = { prefetch = false },
                     generation = { max_tokens = 12, time_budget_ms = 0, draft_mode = "target" } },
  })
  local client = H.wait_ready()
  H.wait(function()
    local _, stats = H.request(client, "completer/stats")
    return stats.definitions_files >= 3
  end, 120000, "the definitions index")

  H.section("before", function()
    vim.cmd("CompleterWhy")
    H.wait(function()
      return #H.result.notifications > 0
    end, 10000, "a message")
    H.check("before", { notifications = H.result.notifications, why_buffer = why_buffer() or vim.NIL })
  end)

  H.section("after", function()
    H.type("A")
    H.wait(function()
      return H.ghost(orders)
    end, 90000, "a suggestion in orders.py")
    H.type("<Esc>")
    vim.cmd("CompleterWhy")
    local buf = H.wait(why_buffer, 10000, "the view's buffer")
    local _, answer = H.request(client, "completer/prompt", { uri = vim.uri_from_bufnr(orders) })
    H.check("after", { view = view(buf), answer = answer })
  end)

  H.section("backticks", function()
    -- A prompt of a markdown file's code block: the view's fence must be longer.
    local answer = { prompt = 'doc = """\n```python\nprint(1)\n```\n"""', sections = {} }
    H.check("backticks", { answer = answer, lines = require("completer.why").lines("readme.py", answer) })
  end)

  H.section("again", function()
    vim.cmd.wincmd("p") -- back to orders.py
    local first = why_buffer()
    vim.cmd("CompleterWhy")
    H.wait(function()
      return vim.api.nvim_get_current_buf() == first
    end, 10000, "the view again")
    H.check("again", { view = view(first), same_buffer = why_buffer() == first })
  end)
end)
