"""What a step can call: tools from Python functions, the threads sync tools run in, the code tool, MCP servers."""
