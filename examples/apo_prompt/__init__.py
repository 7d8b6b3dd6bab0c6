"""The APO example: a calculator agent whose prompt template voltbus improves (see README.md)."""
