-- wrk script: POSTs the file named by the BODY environment variable.
-- With UNIQUE=1 every request is a different pod: the body's pod name
-- "bench" and UID "bench-uid" get a per-request number (the GPU request
-- stays the same), so that nothing keyed on the request's bytes or on the
-- pod can answer from memory.
local f = assert(io.open(os.getenv("BODY"), "rb"))
local body = f:read("*a")
f:close()
wrk.method = "POST"
wrk.body = body
wrk.headers["Content-Type"] = "application/json"

local threads = 0
function setup(thread)
  threads = threads + 1
  thread:set("tid", threads)
end

if os.getenv("UNIQUE") == "1" then
  local a, b = body:find('"bench"', 1, true)
  local c, d = body:find('"bench-uid"', 1, true)
  assert(a and c and b < c, "BODY has no pod named \"bench\" with UID \"bench-uid\"")
  local head, mid, tail = body:sub(1, a), body:sub(b, c), body:sub(d)
  local n = 0
  request = function()
    n = n + 1
    local id = (tid or 0) .. "-" .. n
    return wrk.format(nil, nil, nil, head .. "bench-" .. id .. mid .. "bench-uid-" .. id .. tail)
  end
end
