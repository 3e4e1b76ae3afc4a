"""Node-a lost with its disk and restored from a backup under the request loop, the clients' old key still served."""
