"""rebuild_node.yml puts node-b's replica on its new cards and re-joins a reinstalled node, losing no request."""
