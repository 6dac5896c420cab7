"""An example user project: text classification on top of the launcher."""
