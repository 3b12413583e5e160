from app.server import main

main()
