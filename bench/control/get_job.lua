-- wrk script: GET /v1/jobs/{id} for the job ids in KOLO_BENCH_IDS (comma-separated),
-- round robin per connection, with an optional bearer token (KOLO_TOKEN).
-- Usage: KOLO_BENCH_IDS=a,b,c wrk -t2 -c64 -d10s --latency -s get_job.lua http://127.0.0.1:7080
local ids = {}
for id in string.gmatch(os.getenv("KOLO_BENCH_IDS") or "bench-0", "[^,]+") do
  ids[#ids + 1] = id
end
local token = os.getenv("KOLO_TOKEN")
local counter = 0

function setup(thread)
  thread:set("offset", counter)
  counter = counter + 7
end

function init(args)
  n = offset or 0
  if token then wrk.headers["Authorization"] = "Bearer " .. token end
end

function request()
  n = n + 1
  return wrk.format("GET", "/v1/jobs/" .. ids[(n % #ids) + 1])
end

function response(status, headers, body)
  if status ~= 200 then
    io.stderr:write("unexpected status " .. status .. "\n")
  end
end
