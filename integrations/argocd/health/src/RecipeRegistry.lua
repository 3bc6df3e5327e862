-- RecipeRegistry: the Synced condition (the last sync's outcome); Ready says whether Recipes of
-- an earlier commit still serve. Disabled is a state asked for (Suspended). A sync with problems
-- (recipes that do not validate, names taken) is Healthy: the problems are the repository's,
-- counted in the message and listed in status.problems. A failed sync (FetchFailed,
-- CredentialsInvalid, TargetNamespaceNotServed) is Degraded, saying which commit still serves.
local late = ahead(o, status)
if late ~= nil then return late end
local synced = condition(status, "Synced")
if synced == nil then return {status = "Progressing", message = "waiting for the first sync"} end
local reason = str(synced.reason)
if reason == "Disabled" then return {status = "Suspended", message = said(synced, "Disabled")} end
if synced.status == "True" then return {status = "Healthy", message = said(synced, "Synced")} end
if reason == "SyncPending" or synced.status ~= "False" then
  return {status = "Progressing", message = said(synced, "not synced yet")}
end
local ready = condition(status, "Ready")
local commit = str(status.commit)
if ready ~= nil and ready.status == "True" and commit ~= "" then
  return {status = "Degraded", message = "still serving the Recipes of commit " .. string.sub(commit, 1, 12)
    .. "; last sync " .. said(synced, "failed")}
end
return {status = "Degraded", message = "nothing synced yet; " .. said(synced, "sync failed")}
