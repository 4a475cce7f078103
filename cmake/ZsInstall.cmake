# Placeholder until the install helper lands: nothing installed yet.
