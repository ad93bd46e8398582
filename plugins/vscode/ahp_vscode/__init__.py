"""ahp-vscode: the VS Code window's own JSON-RPC requests, served beside AHP."""
