"""What tests stand on, apart from production code: in-memory seams (`memory`), the real
services a checkout starts (`services`) and the reference orders table (`reference`).
Shared by tests/ and bench/, which never import each other."""
