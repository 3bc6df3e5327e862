-- Runs one Argo CD health script as Argo CD does (Lua 5.1, `obj` a global table) and prints
-- "<status>\t<message>", or "ERROR\t<why>" with exit code 2. Arguments: script, object file
-- (a Lua chunk that returns the object as a table literal, written by the test).
local script, object = arg[1], arg[2]
local load_object = assert(loadfile(object))
obj = load_object()
local check = assert(loadfile(script))
local ok, hs = pcall(check)
if not ok then
  io.write("ERROR\t", tostring(hs), "\n")
  os.exit(2)
end
local allowed = {Healthy = true, Progressing = true, Degraded = true, Suspended = true, Missing = true, Unknown = true}
if type(hs) ~= "table" or type(hs.status) ~= "string" or not allowed[hs.status] then
  io.write("ERROR\tnot a health table: ", tostring(hs and hs.status), "\n")
  os.exit(2)
end
if hs.message ~= nil and type(hs.message) ~= "string" then
  io.write("ERROR\tmessage is a ", type(hs.message), "\n")
  os.exit(2)
end
io.write(hs.status, "\t", hs.message or "", "\n")
