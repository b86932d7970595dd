"""The dashboard pages (run by app.py through st.navigation); a package only so the import contract can check them."""
