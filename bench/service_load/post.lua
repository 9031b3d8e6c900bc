-- wrk script of the texture service's load benchmark (bench/service_load/run.py): every request
-- POSTs one image file as the body, and every answer is checked.
--
--   wrk ... -s post.lua URL -- FILE CONTENT_TYPE EXPECT...
--
-- An answer is right when its status is 200 and its body holds every EXPECT string (plain text,
-- e.g. '"decision":"accepted"'). done() prints one line for the driver:
--   service-load: completed=N duration_us=N right=N wrong=N p50_us=N p90_us=N p99_us=N max_us=N
--   connect=N read=N write=N timeout=N status=N codes=CODE:N,... first_bad=TEXT
-- completed counts the answers (wrk's requests), status the answers of 400 and above (wrk's own
-- count), codes every status other than 200, first_bad the start of the first answer that was not
-- right. The request is formatted once (wrk's static request): no per-request Lua.

local threads = {}

function setup(thread)
  table.insert(threads, thread)
end

function init(args)
  local path, content_type = args[1], args[2]
  local f = assert(io.open(path, "rb"), "post.lua: cannot open " .. tostring(path))
  wrk.body = f:read("*a")
  f:close()
  wrk.method = "POST"
  wrk.headers["Content-Type"] = content_type
  expect = {}
  for i = 3, #args do
    expect[#expect + 1] = args[i]
  end
  right, wrong = 0, 0
  codes = {}
  first_bad = ""
end

function response(status, headers, body)
  local ok = status == 200
  if ok then
    for _, e in ipairs(expect) do
      if not string.find(body, e, 1, true) then
        ok = false
        break
      end
    end
  else
    codes[status] = (codes[status] or 0) + 1
  end
  if ok then
    right = right + 1
  else
    wrong = wrong + 1
    if first_bad == "" then
      first_bad = status .. " " .. string.sub(string.gsub(body or "", "%s+", " "), 1, 200)
    end
  end
end

function done(summary, latency, requests)
  local total = { right = 0, wrong = 0 }
  local all_codes, bad = {}, ""
  for _, t in ipairs(threads) do
    for k, _ in pairs(total) do
      total[k] = total[k] + (t:get(k) or 0)
    end
    for code, n in pairs(t:get("codes") or {}) do
      all_codes[code] = (all_codes[code] or 0) + n
    end
    if bad == "" then
      bad = t:get("first_bad") or ""
    end
  end
  local list = {}
  for code, n in pairs(all_codes) do
    list[#list + 1] = code .. ":" .. n
  end
  local e = summary.errors
  io.write(string.format(
    "service-load: completed=%d duration_us=%d right=%d wrong=%d p50_us=%d p90_us=%d p99_us=%d "
      .. "max_us=%d connect=%d read=%d write=%d timeout=%d status=%d codes=%s first_bad=%s\n",
    summary.requests, summary.duration, total.right, total.wrong, latency:percentile(50),
    latency:percentile(90), latency:percentile(99), latency.max, e.connect, e.read, e.write, e.timeout, e.status,
    table.concat(list, ","), bad))
end
