-- The compose stack's two Postgres roles (deploy/README.md, "Postgres roles"), run once by the
-- postgres image when it initialises its data directory. Development passwords: never use them
-- outside a development machine.
CREATE ROLE "ration_owner" LOGIN PASSWORD 'ration-owner';
CREATE ROLE "ration_app" LOGIN NOSUPERUSER NOBYPASSRLS PASSWORD 'ration-app';
CREATE DATABASE "ration" OWNER "ration_owner";
\connect ration
ALTER DEFAULT PRIVILEGES FOR ROLE "ration_owner" GRANT USAGE ON SCHEMAS TO "ration_app";
ALTER DEFAULT PRIVILEGES FOR ROLE "ration_owner" GRANT SELECT, INSERT, UPDATE, DELETE ON TABLES TO "ration_app";
ALTER DEFAULT PRIVILEGES FOR ROLE "ration_owner" GRANT USAGE, SELECT ON SEQUENCES TO "ration_app";
ALTER DEFAULT PRIVILEGES FOR ROLE "ration_owner" GRANT EXECUTE ON FUNCTIONS TO "ration_app";
