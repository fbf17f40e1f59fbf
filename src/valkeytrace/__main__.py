from valkeytrace.cli import main

main()
