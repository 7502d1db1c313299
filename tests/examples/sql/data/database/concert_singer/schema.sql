CREATE TABLE singer (Singer_ID INTEGER PRIMARY KEY, Name TEXT, Country TEXT, Age INTEGER);
CREATE TABLE concert (concert_ID INTEGER PRIMARY KEY, concert_Name TEXT, Stadium_ID INTEGER, Year TEXT);
CREATE TABLE singer_in_concert (concert_ID INTEGER, Singer_ID INTEGER);
INSERT INTO singer VALUES (1, 'Joe Sharp', 'Netherlands', 52), (2, 'Timbaland', 'United States', 32),
  (3, 'Justin Brown', 'France', 29), (4, 'Rose White', 'France', 41);
INSERT INTO concert VALUES (1, 'Auditions', 1, '2014'), (2, 'Super bootcamp', 2, '2014'), (3, 'Home Visits', 2, '2015');
INSERT INTO singer_in_concert VALUES (1, 2), (1, 3), (2, 3), (3, 1), (3, 4);
