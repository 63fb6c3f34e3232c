-- wrk script of `make bench` (scripts/bench.sh, cmd/loadgen): sends
-- requests that cmd/loadgen built, signed and wrote to files, one file per
-- wrk thread, each record an 8-digit length and the raw HTTP/1.1 request.
--
--   wrk -t2 -cN -s scripts/bench.lua URL -- PREFIX THREADS MODE RATE
--
-- PREFIX.<thread> holds a thread's requests (threads count from 0).
-- MODE "once": every request is sent once; a thread whose requests are all
-- answered stops, and the last thread to stop wakes wrk's main thread, so
-- wrk's duration (and its Requests/sec) is the time to acknowledge them all.
-- MODE "cycle": the requests are sent round and round until wrk's -d ends
-- (a server that stores nothing, where distinct events do not matter).
-- RATE > 0 paces each thread to RATE/THREADS requests per second with
-- wrk's delay() hook; wrk stays closed-loop (a connection sends its next
-- request only once its last is answered), so the rate is an offer, and
-- the achieved rate is reported.
--
-- done() prints "bench:" lines that cmd/loadgen reads: latency percentiles
-- in microseconds, wrk's counters, and what the threads counted.

local ffi = require("ffi")
ffi.cdef [[
  typedef struct { long tv_sec; long tv_nsec; } bench_timespec;
  int clock_gettime(int clock, bench_timespec *tp);
  int getpid(void);
  int tgkill(int tgid, int tid, int sig);
]]

local CLOCK_REALTIME, SIGINT = 0, 2
local ts = ffi.new("bench_timespec")
local function now_us()
  ffi.C.clock_gettime(CLOCK_REALTIME, ts)
  return tonumber(ts.tv_sec) * 1000000 + math.floor(tonumber(ts.tv_nsec) / 1000)
end

-- Main state: the threads, to read their counters in done().
local threads = {}

function setup(thread)
  thread:set("id", #threads)
  table.insert(threads, thread)
end

-- Thread state; the counters are globals, which thread:get() reads.
local blob, offsets, lengths
count, sent, answered, non2xx, first_bad = 0, 0, 0, 0, ""
first_send, last_answer = 0, 0
local once, nthreads, prefix
local verifying

function init(args)
  prefix, nthreads = args[1], tonumber(args[2])
  once = args[3] ~= "cycle"
  local rate = tonumber(args[4] or "0") or 0
  local f = assert(io.open(prefix .. "." .. id, "rb"))
  blob = f:read("*a")
  f:close()
  offsets, lengths = {}, {}
  local pos = 1
  while pos <= #blob do
    local n = tonumber(blob:sub(pos, pos + 7))
    offsets[#offsets + 1], lengths[#lengths + 1] = pos + 8, n
    pos = pos + 8 + n
  end
  count = #offsets
  assert(count > 0, "no requests in " .. prefix .. "." .. id)
  -- wrk calls request() once on thread 0 before the run to check it
  -- builds a request; that one is not sent.
  verifying = id == 0
  if rate > 0 then
    local interval = 1000000 * nthreads / rate
    local due
    delay = function()
      local now = now_us()
      -- Behind schedule (every connection busy): start again from now
      -- rather than send a burst to catch up.
      if due == nil or due < now - interval then due = now end
      due = due + interval
      return math.floor((due - now) / 1000)
    end
  end
end

function request()
  if verifying then
    verifying = false
    return blob:sub(offsets[1], offsets[1] + lengths[1] - 1)
  end
  if once and sent >= count then
    -- Nothing left for this connection: an empty write keeps it idle
    -- until the thread stops.
    return ""
  end
  local i = sent % count + 1
  sent = sent + 1
  if first_send == 0 then first_send = now_us() end
  return blob:sub(offsets[i], offsets[i] + lengths[i] - 1)
end

local function finished()
  local f = io.open(prefix .. ".done." .. id, "w")
  f:close()
  for t = 0, nthreads - 1 do
    local g = io.open(prefix .. ".done." .. t, "r")
    if not g then return end
    g:close()
  end
  -- Every thread is done: wrk's main thread sleeps for -d, and SIGINT (its
  -- own handler) wakes it to join the threads and print the results.
  local pid = ffi.C.getpid()
  ffi.C.tgkill(pid, pid, SIGINT)
end

function response(status, headers, body)
  answered = answered + 1
  last_answer = now_us()
  if status < 200 or status > 299 then
    non2xx = non2xx + 1
    if first_bad == "" then first_bad = status .. " " .. body:sub(1, 200):gsub("%s+", " ") end
  end
  if once and answered == count then
    wrk.thread:stop()
    finished()
  end
end

function done(summary, latency, requests)
  local e = summary.errors
  io.write(string.format("bench: duration_us=%d requests=%d connect=%d read=%d write=%d status=%d timeout=%d\n",
    summary.duration, summary.requests, e.connect, e.read, e.write, e.status, e.timeout))
  io.write(string.format("bench: latency_us p50=%d p90=%d p99=%d p999=%d max=%d mean=%.0f\n",
    latency:percentile(50), latency:percentile(90), latency:percentile(99), latency:percentile(99.9),
    latency.max, latency.mean))
  for _, t in ipairs(threads) do
    io.write(string.format("bench: thread=%d requests=%d sent=%d answered=%d non2xx=%d first_send_us=%d last_answer_us=%d first_bad=%q\n",
      t:get("id"), t:get("count"), t:get("sent"), t:get("answered"), t:get("non2xx"),
      t:get("first_send"), t:get("last_answer"), t:get("first_bad")))
  end
end
